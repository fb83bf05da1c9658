// `memseal check CASE.so`: loads a shared library exporting `extern "C" void step(int)` (and
// optionally `setup()`), runs it under the leak detector, prints the report and writes JSON, the
// HTML page and the allocation trace for PyTorch's memory viewer when asked.
// Exit: 0 no leak, 1 leak, 2 usage or load error.
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include "cli/baseline_flags.h"
#include "cli/case_loader.h"
#include "cli/command_list.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "memseal/explain.h"
#include "memseal/leak_detector.h"

namespace memseal::cli {

namespace {

struct CheckOptions {
  std::string case_path;
  std::uint32_t steps = 30;
  std::uint32_t warmup = 5;
  OutputFlags output;
  std::string memory_viz_path;
  std::size_t memory_viz_events = 40000;
  TrackerFlags tracker;
  bool quiet = false;
  BaselineFlags baseline;
};

int runCheck(const CheckOptions& options) {
  if (options.steps <= options.warmup + 3) {
    std::cerr << "memseal check: --steps (" << options.steps << ") must exceed --warmup ("
              << options.warmup << ") + 3, to tell growth from noise\n";
    return kExitUsage;
  }
  DetectorOptions detector;
  detector.steps = options.steps;
  detector.warmup = options.warmup;
  detector.on_leak = ReportPolicy::kNone;
  options.tracker.applyTo(detector.tracker);
  // The environment is read now, so a bad MEMSEAL_* value stops us before the case runs.
  try {
    detector.tracker.resolved();
  } catch (const std::invalid_argument& error) {
    std::cerr << "memseal check: " << error.what() << "\n";
    return kExitUsage;
  }
  // Refuse to overwrite a directory or write where we cannot, before running anything.
  if (!options.output.check("check") ||
      !checkOutputPath("check", "--memory-viz", options.memory_viz_path) ||
      (options.baseline.given() && !options.baseline.check("check"))) {
    return kExitUsage;
  }
  LoadedCase loaded;
  std::string error;
  if (!loadCase(options.case_path, &loaded, &error)) {
    std::cerr << "memseal check: " << error << "\n";
    return kExitUsage;
  }
  if (loaded.setup != nullptr) loaded.setup();
  std::optional<MemoryTrace> trace;
  if (!options.memory_viz_path.empty()) {
    trace.emplace(options.memory_viz_events);
    trace->start();
  }
  LeakReport report = check([&](int i) { loaded.step(i); }, detector);
  if (trace) trace->stop();
  if (!options.quiet || report.leak) std::cout << report.toText();
  if (!options.output.json_path.empty() &&
      !writeOutput("check", options.output.json_path, report.toJson())) {
    return kExitUsage;
  }
  if (!writeHtmlIfAsked("check", options.output.html_path, options.case_path,
                        HtmlPage{"", &report, nullptr, nullptr, ""})) {
    return kExitUsage;
  }
  if (trace) {
    if (!writeOutput("check", options.memory_viz_path, trace->memoryVizPickle())) {
      return kExitUsage;
    }
    std::cerr << "memseal check: memory_viz trace: " << trace->allocations() << " allocations, "
              << trace->frees() << " frees, " << trace->liveBytes() << " bytes live in "
              << trace->liveCount() << " allocations at the end";
    if (trace->dropped() > 0) std::cerr << " (" << trace->dropped() << " older events dropped)";
    std::cerr << " -> " << options.memory_viz_path << "\n";
  }
  if (options.baseline.given()) return options.baseline.apply("check", report.toJson());
  return report.leak ? kExitLeak : kExitOk;
}

}  // namespace

void addCheckCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* command = app.add_subcommand("check",
                                         "Run a loop from a shared library under the leak detector "
                                         "(exit 0: no leak, 1: leak, 2: error)");
  command
      ->add_option("case", options->case_path,
                   "Shared library exporting extern \"C\" void step(int) and optionally setup()")
      ->required();
  command->add_option("--steps", options->steps, "Steps to run, warm-up included (default 30)")
      ->check(CLI::Range(1u, 10000000u));
  command->add_option("--warmup", options->warmup, "Warm-up steps never blamed (default 5)");
  options->output.addTo(command, "Write the report as JSON (memseal.check/1)");
  options->tracker.addTo(command, "every step until the loop repeats itself, then one in 16");
  command->add_option("--memory-viz", options->memory_viz_path,
                      "Write the allocation trace as the pickle PyTorch's memory viewer reads "
                      "(torch.cuda._memory_viz, pytorch.org/memory_viz)");
  command
      ->add_option(
          "--memory-viz-events", options->memory_viz_events,
          "Newest allocations and frees the trace keeps (default 40000: PyTorch's viewer opens "
          "about 100000 entries, five per allocation and free)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  command->add_flag("--quiet", options->quiet, "Print the report only when a leak is found");
  options->baseline.addTo(command);
  entries.push_back({command, [options] { return runCheck(*options); }});
}

}  // namespace memseal::cli
