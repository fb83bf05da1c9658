// `memseal explain CASE.so`: runs the case's step under the tracker and says what was live at the
// peak of a step, by role (parameters, gradients, optimizer state, activations, temporaries),
// module and site. A case names its model and optimizer by exporting memseal_roles().
// Exit: 0 explained, 2 usage, load or run error.
#include <iostream>
#include <optional>
#include <string>

#include "cli/baseline_flags.h"
#include "cli/case_loader.h"
#include "cli/command_list.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "memseal/explain.h"

namespace memseal::cli {

namespace {

struct ExplainCommandOptions {
  std::string case_path;
  std::uint32_t steps = 4;
  std::uint32_t warmup = 2;
  OutputFlags output;
  TrackerFlags tracker;
  BaselineFlags baseline;
};

int runExplain(const ExplainCommandOptions& options) {
  if (options.steps <= options.warmup) {
    std::cerr << "memseal explain: --steps (" << options.steps << ") must exceed --warmup ("
              << options.warmup << ")\n";
    return kExitUsage;
  }
  ExplainOptions explain;
  explain.steps = options.steps;
  explain.warmup = options.warmup;
  options.tracker.applyTo(explain.tracker);
  try {
    explain.tracker.resolved();
  } catch (const std::invalid_argument& error) {
    std::cerr << "memseal explain: " << error.what() << "\n";
    return kExitUsage;
  }
  if (!options.output.check("explain") ||
      (options.baseline.given() && !options.baseline.check("explain"))) {
    return kExitUsage;
  }
  LoadedCase loaded;
  std::string error;
  if (!loadCase(options.case_path, &loaded, &error)) {
    std::cerr << "memseal explain: " << error << "\n";
    return kExitUsage;
  }
  if (loaded.roles != nullptr) {
    explain.roles = [&loaded] {
      RoleTensors roles;
      loaded.roles(&roles);
      return roles;
    };
  }
  PeakReport report;
  try {
    if (loaded.setup != nullptr) loaded.setup();
    report = explainPeak([&](int i) { loaded.step(i); }, explain);
  } catch (const std::exception& failure) {
    std::cerr << "memseal explain: the case failed: " << failure.what() << "\n";
    return kExitUsage;
  }
  std::cout << report.toText();
  if (!options.output.json_path.empty() &&
      !writeOutput("explain", options.output.json_path, report.toJson())) {
    return kExitUsage;
  }
  if (!writeHtmlIfAsked("explain", options.output.html_path, options.case_path,
                        HtmlPage{"", nullptr, &report, nullptr, ""})) {
    return kExitUsage;
  }
  if (options.baseline.given()) return options.baseline.apply("explain", report.toJson());
  return kExitOk;
}

}  // namespace

void addExplainCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<ExplainCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "explain",
      "Say what is live at the peak of a step: parameters, gradients, optimizer state, "
      "activations, temporaries; by module and site (exit 0, or 2 on error)");
  command
      ->add_option("case", options->case_path,
                   "Shared library exporting extern \"C\" void step(int), optionally setup() and "
                   "memseal_roles(memseal::RoleTensors*)")
      ->required();
  command->add_option("--steps", options->steps, "Steps to run, warm-up included (default 4)")
      ->check(CLI::Range(1u, 1000000u));
  command->add_option("--warmup", options->warmup,
                      "Steps run first and not measured (default 2: lazy optimizer state)");
  options->output.addTo(command, "Write the breakdown as JSON (memseal.explain/1)");
  options->tracker.addTo(command, nullptr);
  options->baseline.addTo(command);
  entries.push_back({command, [options] { return runExplain(*options); }});
}

}  // namespace memseal::cli
