// The memseal demo: built-in leaky and healthy libtorch loops, each run under the leak detector and
// printed with its verdict and diagnosis. Exits 0 when every verdict is the expected one.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "loops/example_loops.h"
#include "memseal/leak_detector.h"

namespace {

struct DemoOptions {
  std::uint32_t steps = 25;
  std::uint32_t warmup = 5;
  bool all = false;
};

int runDemo(const DemoOptions& options) {
  int unexpected = 0;
  std::vector<std::string> summary;
  for (const memseal::examples::ExampleLoop& loop : memseal::examples::exampleLoops()) {
    if (!loop.in_demo && !options.all) continue;
    std::cout << "\n=== " << loop.name << (loop.expected.empty() ? "  (healthy)" : "  (leaks)")
              << "\n    " << loop.code << "\n\n";
    memseal::DetectorOptions detector;
    detector.steps = std::max(options.steps, loop.min_steps);
    detector.warmup = options.warmup;
    detector.on_leak = memseal::ReportPolicy::kNone;
    memseal::LeakReport report = memseal::check(loop.make(), detector);
    std::cout << report.toText();
    std::string got =
        report.leak ? memseal::categoryId(report.findings.front().category) : "no leak";
    std::string want = loop.expected.empty() ? "no leak" : loop.expected;
    bool as_expected = got == want;
    unexpected += as_expected ? 0 : 1;
    char line[200];
    std::snprintf(line, sizeof(line), "  %-30s %-30s %s", loop.name.c_str(), got.c_str(),
                  as_expected ? "as expected" : ("UNEXPECTED, wanted " + want).c_str());
    summary.push_back(line);
  }
  std::cout << "\n=== summary\n";
  for (const std::string& line : summary) std::cout << line << "\n";
  return unexpected == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memseal demo: leaky and healthy libtorch loops under the leak detector"};
  DemoOptions options;
  app.add_option("--steps", options.steps, "Steps per loop, warm-up included")
      ->check(CLI::Range(9u, 100000u));
  app.add_option("--warmup", options.warmup, "Warm-up steps per loop")
      ->check(CLI::Range(0u, 10000u));
  app.add_flag("--all", options.all, "Also run the extra loops of the test suite");
  try {
    app.parse(argc, argv);
    if (options.steps <= options.warmup + 3) {
      throw CLI::ValidationError("--steps must exceed --warmup + 3");
    }
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  return runDemo(options);
}
