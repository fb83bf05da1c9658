// The diagnosis over every example and test loop, as the table in BENCHMARKS.md: whether the
// verdict and the first finding's category are right, how many findings, and how many steps after
// warm-up until the verdict was clear. Default detector options, warm-up 5, 25 steps (or the
// loop's own minimum).
#include <algorithm>
#include <cstdio>
#include <string>

#include "loops/example_loops.h"
#include "memseal/leak_detector.h"

int main() {
  std::printf(
      "| loop | expected | verdict | first finding | findings | steps after warm-up until clear "
      "|\n");
  std::printf("|---|---|---|---|---:|---:|\n");
  int wrong = 0;
  for (const memseal::examples::ExampleLoop& loop : memseal::examples::exampleLoops()) {
    memseal::DetectorOptions options;
    options.on_leak = memseal::ReportPolicy::kNone;
    options.warmup = 5;
    options.steps = std::max<std::uint32_t>(25, loop.min_steps);
    memseal::LeakReport report = memseal::check(loop.make(), options);
    bool leak_expected = !loop.expected.empty();
    bool verdict_right = report.leak == leak_expected;
    std::string first = report.leak ? memseal::categoryId(report.findings.front().category) : "";
    bool category_right = !leak_expected || first == loop.expected;
    wrong += verdict_right && category_right ? 0 : 1;
    std::string clear = "";
    if (report.detected_at_step) {
      clear = std::to_string(*report.detected_at_step - options.warmup + 1);
    }
    std::printf("| %s | %s | %s %s | %s %s | %zu | %s |\n", loop.name.c_str(),
                leak_expected ? loop.expected.c_str() : "no leak", report.leak ? "leak" : "no leak",
                verdict_right ? "(right)" : "(WRONG)", report.leak ? first.c_str() : "-",
                report.leak ? (category_right ? "(right)" : "(WRONG)") : "", report.findings.size(),
                clear.empty() ? "-" : clear.c_str());
  }
  std::printf("\n%d loop(s) wrong\n", wrong);
  return wrong == 0 ? 0 : 1;
}
