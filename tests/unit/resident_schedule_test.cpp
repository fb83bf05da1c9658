// When a step boundary reads resident memory: every boundary while a verdict forms, then as often
// as the read's cost allows beside the time the steps take, never fewer than one in kMaxStride.
#include "detect/resident_schedule.h"

#include <gtest/gtest.h>

namespace memseal::detect {
namespace {

constexpr std::int64_t kMicrosecond = 1000;

// Boundaries `step_ns` apart whose reads cost `read_ns`, from step 0 to `steps`, with no boundary
// forced; returns the steps that read.
std::vector<std::uint32_t> readsOf(std::int64_t step_ns, std::int64_t read_ns,
                                   std::uint32_t steps) {
  ResidentSchedule schedule;
  std::vector<std::uint32_t> read;
  std::int64_t now = 0;
  for (std::uint32_t step = 0; step < steps; ++step) {
    now += step_ns;
    if (!schedule.due(step, now, false)) continue;
    read.push_back(step);
    schedule.noteRead(step, now, now + read_ns);
    now += read_ns;
  }
  return read;
}

TEST(ResidentSchedule, SlowStepsAreReadOnEveryBoundary) {
  std::vector<std::uint32_t> read = readsOf(4000 * kMicrosecond, 3 * kMicrosecond, 50);
  EXPECT_EQ(read.size(), 50u);
}

TEST(ResidentSchedule, FastStepsAreReadAsOftenAsTheReadsCostAllows) {
  // 800 us steps, 3 us reads: a read once 3,072 us have passed, so on every fourth boundary.
  std::vector<std::uint32_t> read = readsOf(800 * kMicrosecond, 3 * kMicrosecond, 400);
  ASSERT_GE(read.size(), 2u);
  for (std::size_t i = 1; i < read.size(); ++i) EXPECT_EQ(read[i] - read[i - 1], 4u);
}

TEST(ResidentSchedule, VeryFastStepsAreStillReadEveryFewBoundaries) {
  std::vector<std::uint32_t> read = readsOf(kMicrosecond, 3 * kMicrosecond, 100);
  ASSERT_GE(read.size(), 2u);
  for (std::size_t i = 1; i < read.size(); ++i) {
    EXPECT_EQ(read[i] - read[i - 1], ResidentSchedule::kMaxStride);
  }
}

TEST(ResidentSchedule, ForcedBoundariesAndTheFirstOneAlwaysRead) {
  ResidentSchedule schedule;
  EXPECT_TRUE(schedule.due(7, 0, false));        // nothing read yet
  schedule.noteRead(7, 0, 1000 * kMicrosecond);  // a read that took a millisecond
  EXPECT_FALSE(schedule.due(8, 1001 * kMicrosecond, false));
  EXPECT_TRUE(schedule.due(8, 1001 * kMicrosecond, true));
}

}  // namespace
}  // namespace memseal::detect
