// `memseal check CASE.so`: loads a shared library exporting `extern "C" void step(int)` (and
// optionally `setup()`), runs it under the leak detector, prints the report and writes JSON.
// Exit: 0 no leak, 1 leak, 2 usage or load error.
#include <dlfcn.h>
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "cli/case_loader.h"
#include "cli/command_list.h"
#include "cli/commands.h"
#include "memseal/leak_detector.h"
#include "track/option_values.h"

namespace memseal::cli {

namespace {

struct CheckOptions {
  std::string case_path;
  std::uint32_t steps = 30;
  std::uint32_t warmup = 5;
  std::string json_path;
  std::string stacks = "on";
  std::string observe_ops = "all";
  bool quiet = false;
};

// "all" or "every:N": on which steps ops are watched (TrackerOptions::observe_ops_every).
std::uint32_t parseObserveOps(const std::string& value) {
  if (value == "all") return 1;
  if (std::optional<std::uint32_t> every = track::countAfterPrefix(value, "every:")) return *every;
  throw CLI::ValidationError("--observe-ops", "expected all or every:N, got '" + value + "'");
}

StackMode parseStacks(const std::string& value, std::uint32_t* every) {
  if (value == "on") return StackMode::kOn;
  if (value == "off") return StackMode::kOff;
  if (std::optional<std::uint32_t> sample_every = track::countAfterPrefix(value, "sample:")) {
    *every = *sample_every;
    return StackMode::kSampled;
  }
  throw CLI::ValidationError("--stacks", "expected on, off or sample:N, got '" + value + "'");
}

int runCheck(const CheckOptions& options) {
  if (options.steps <= options.warmup + 3) {
    std::cerr << "memseal check: --steps (" << options.steps << ") must exceed --warmup ("
              << options.warmup << ") + 3, to tell growth from noise\n";
    return kExitUsage;
  }
  DetectorOptions detector;
  detector.steps = options.steps;
  detector.warmup = options.warmup;
  detector.on_leak = LeakPolicy::kNone;
  detector.tracker.stacks = parseStacks(options.stacks, &detector.tracker.stack_sample_every);
  detector.tracker.observe_ops_every = parseObserveOps(options.observe_ops);
  // Refuse to overwrite a directory or write where we cannot, before running anything.
  if (!options.json_path.empty()) {
    struct stat info {};
    if (stat(options.json_path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      std::cerr << "memseal check: --json " << options.json_path << " is a directory\n";
      return kExitUsage;
    }
  }
  LoadedCase loaded;
  std::string error;
  if (!loadCase(options.case_path, &loaded, &error)) {
    std::cerr << "memseal check: " << error << "\n";
    return kExitUsage;
  }
  if (loaded.setup != nullptr) loaded.setup();
  LeakReport report = check([&](int i) { loaded.step(i); }, detector);
  if (!options.quiet || report.leak) std::cout << report.toText();
  if (!options.json_path.empty()) {
    // Write beside the target and rename, so a failed write never leaves half a file.
    std::string temporary = options.json_path + ".tmp";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << report.toJson();
      if (!out) {
        std::cerr << "memseal check: cannot write " << temporary << "\n";
        std::remove(temporary.c_str());
        return kExitUsage;
      }
    }
    if (std::rename(temporary.c_str(), options.json_path.c_str()) != 0) {
      std::cerr << "memseal check: cannot write " << options.json_path << "\n";
      std::remove(temporary.c_str());
      return kExitUsage;
    }
  }
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
  command->add_option("--json", options->json_path, "Write the report as JSON (memseal.check/1)");
  command->add_option("--stacks", options->stacks,
                      "Native stacks: on, off or sample:N (default on)");
  command->add_option("--observe-ops", options->observe_ops,
                      "Watch ops on every step (all) or one step in N (every:N), attributing the "
                      "others by replay: less overhead on loops of small ops (default all)");
  command->add_flag("--quiet", options->quiet, "Print the report only when a leak is found");
  entries.push_back({command, [options] { return runCheck(*options); }});
}

}  // namespace memseal::cli
