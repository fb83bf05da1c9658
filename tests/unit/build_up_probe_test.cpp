// When `memseal run` reports before the pause between reports is over (inject/build_up_probe.h):
// at the sixth and sixteenth step end of a rise in tracked tensor memory, never on a flat loop,
// and no closer together than the shortest gap.
#include "inject/build_up_probe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace memseal::inject {
namespace {

using Clock = BuildUpProbe::Clock;
using std::chrono::milliseconds;

// The step ends (numbered from 0) after which the probe asks for a report, for tracked bytes
// `live[i]` at step end i, one step every `step_time`.
std::vector<int> reportsAt(BuildUpProbe& probe, const std::vector<std::int64_t>& live,
                           Clock::duration step_time) {
  std::vector<int> steps;
  Clock::time_point now{};
  for (std::size_t i = 0; i < live.size(); ++i) {
    now += step_time;
    if (probe.reportNow(live[i], now)) steps.push_back(static_cast<int>(i));
  }
  return steps;
}

// `count` step ends of a loop that keeps `per_step` bytes more at each, from `from`.
std::vector<std::int64_t> rising(std::int64_t from, std::int64_t per_step, int count) {
  std::vector<std::int64_t> live;
  for (int i = 0; i < count; ++i) live.push_back(from + per_step * i);
  return live;
}

TEST(BuildUpProbe, AFlatLoopNeverReportsEarly) {
  BuildUpProbe probe(milliseconds(1000));
  std::vector<std::int64_t> live(500, 4096);
  EXPECT_TRUE(reportsAt(probe, live, milliseconds(1)).empty());
}

TEST(BuildUpProbe, ABuildUpReportsAtItsSixthAndSixteenthRisingStep) {
  BuildUpProbe probe(milliseconds(1000));
  // Step end 0 is the first seen; 1..40 each keep 1 KiB more.
  std::vector<int> expected = {BuildUpProbe::kFirstReportAfter, BuildUpProbe::kSecondReportAfter};
  EXPECT_EQ(reportsAt(probe, rising(4096, 1024, 41), milliseconds(150)), expected);
}

TEST(BuildUpProbe, ARiseBrokenByAFlatStepStartsCountingAgain) {
  BuildUpProbe probe(milliseconds(0));
  std::vector<std::int64_t> live = rising(0, 10, 5);  // four rises
  live.push_back(40);                                 // flat
  for (std::int64_t bytes : rising(50, 10, 6)) live.push_back(bytes);
  // The rise after the flat step reaches six rises at its sixth step end (index 11).
  EXPECT_EQ(reportsAt(probe, live, milliseconds(1)), std::vector<int>{11});
}

TEST(BuildUpProbe, RisesCloserTogetherThanTheGapGetOneEarlyReport) {
  BuildUpProbe probe(milliseconds(1000));
  // Rises of 10 step ends, each then freed, 10 ms a step: only the first rise's sixth step end is
  // a report until a second has passed since it.
  std::vector<std::int64_t> live;
  for (int rise = 0; rise < 20; ++rise) {
    for (std::int64_t bytes : rising(0, 100, 10)) live.push_back(bytes);
  }
  std::vector<int> reports = reportsAt(probe, live, milliseconds(10));
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0], BuildUpProbe::kFirstReportAfter);
  // The next rise whose sixth step end is 1 s (100 steps) or more after the first report.
  EXPECT_EQ(reports[1], 10 * 10 + BuildUpProbe::kFirstReportAfter);
}

}  // namespace
}  // namespace memseal::inject
