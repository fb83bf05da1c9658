// `memseal demo`: the built-in leaky and healthy loops, each run under the leak detector and
// printed with its verdict and diagnosis. Exits 0 when every verdict is the expected one.
#include <cstdio>
#include <iostream>

#include "cli/command_list.h"
#include "cli/commands.h"
#include "loops/example_loops.h"
#include "memseal/leak_detector.h"

namespace memseal::cli {

namespace {

struct DemoOptions {
  std::uint32_t steps = 25;
  std::uint32_t warmup = 5;
  bool all = false;
};

int runDemo(const DemoOptions& options) {
  int unexpected = 0;
  std::vector<std::string> summary;
  for (const examples::ExampleLoop& loop : examples::exampleLoops()) {
    if (!loop.in_demo && !options.all) continue;
    std::cout << "\n=== " << loop.name << (loop.expected.empty() ? "  (healthy)" : "  (leaks)")
              << "\n    " << loop.code << "\n\n";
    DetectorOptions detector;
    detector.steps = options.steps;
    detector.warmup = options.warmup;
    detector.on_leak = LeakPolicy::kNone;
    LeakReport report = check(loop.make(), detector);
    std::cout << report.toText();
    std::string got = report.leak ? categoryId(report.findings.front().category) : "no leak";
    std::string want = loop.expected.empty() ? "no leak" : loop.expected;
    bool as_expected = got == want;
    unexpected += as_expected ? 0 : 1;
    char line[200];
    std::snprintf(line, sizeof(line), "  %-26s %-30s %s", loop.name.c_str(), got.c_str(),
                  as_expected ? "as expected" : ("UNEXPECTED, wanted " + want).c_str());
    summary.push_back(line);
  }
  std::cout << "\n=== summary\n";
  for (const std::string& line : summary) std::cout << line << "\n";
  return unexpected == 0 ? kExitOk : kExitLeak;
}

}  // namespace

void addDemoCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* demo = app.add_subcommand(
      "demo",
      "Run built-in leaky and healthy libtorch loops under the leak detector and explain them");
  demo->add_option("--steps", options->steps, "Steps per loop, warm-up included")
      ->check(CLI::Range(9u, 100000u));
  demo->add_option("--warmup", options->warmup, "Warm-up steps per loop")
      ->check(CLI::Range(0u, 10000u));
  demo->add_flag("--all", options->all, "Also run the extra loops of the test suite");
  entries.push_back({demo, [options] {
                       if (options->steps <= options->warmup + 3) {
                         throw CLI::ValidationError("--steps must exceed --warmup + 3");
                       }
                       return runDemo(*options);
                     }});
}

}  // namespace memseal::cli
