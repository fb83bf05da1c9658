// Which step boundaries do costly work (detect/boundary_schedule.h): resident memory read on every
// boundary while a verdict forms, then as often as the read's cost allows beside the time the
// steps take, never fewer than one boundary in 8; a moving loop's verdict renewed every 8
// boundaries whatever it costs, a flat loop's no more often and at least one boundary in 64. And
// malloc's free bytes (detect/resident_memory.h): read with every reading while that is cheap,
// as its cost allows once two reads in a row were not.
#include "detect/boundary_schedule.h"
#include "detect/resident_memory.h"

#include <gtest/gtest.h>

#include <vector>

namespace memseal::detect {
namespace {

constexpr std::int64_t kMicrosecond = 1000;

// Boundaries `step_ns` apart whose work costs `work_ns`, from step 0 to `steps`, with no boundary
// forced; returns the steps that did the work.
std::vector<std::uint32_t> workOf(CostBoundedSchedule schedule, std::int64_t step_ns,
                                  std::int64_t work_ns, std::uint32_t steps) {
  std::vector<std::uint32_t> done;
  std::int64_t now = 0;
  for (std::uint32_t step = 0; step < steps; ++step) {
    now += step_ns;
    if (!schedule.due(step, now, false)) continue;
    done.push_back(step);
    schedule.noteDone(step, now, now + work_ns);
    now += work_ns;
  }
  return done;
}

void expectEvenlyApart(const std::vector<std::uint32_t>& done, std::uint32_t stride) {
  ASSERT_GE(done.size(), 2u);
  for (std::size_t i = 1; i < done.size(); ++i) EXPECT_EQ(done[i] - done[i - 1], stride);
}

TEST(ResidentSchedule, SlowStepsAreReadOnEveryBoundary) {
  std::vector<std::uint32_t> read =
      workOf(residentSchedule(), 4000 * kMicrosecond, 3 * kMicrosecond, 50);
  EXPECT_EQ(read.size(), 50u);
}

TEST(ResidentSchedule, FastStepsAreReadAsOftenAsTheReadsCostAllows) {
  // 800 us steps, 3 us reads: a read once 3,072 us have passed, so on every fourth boundary.
  expectEvenlyApart(workOf(residentSchedule(), 800 * kMicrosecond, 3 * kMicrosecond, 400), 4);
}

TEST(ResidentSchedule, VeryFastStepsAreStillReadEveryFewBoundaries) {
  expectEvenlyApart(workOf(residentSchedule(), kMicrosecond, 3 * kMicrosecond, 100),
                    residentSchedule().maxStride());
}

TEST(ResidentSchedule, ForcedBoundariesAndTheFirstOneAlwaysRead) {
  CostBoundedSchedule schedule = residentSchedule();
  EXPECT_TRUE(schedule.due(7, 0, false));        // nothing read yet
  schedule.noteDone(7, 0, 1000 * kMicrosecond);  // a read that took a millisecond
  EXPECT_FALSE(schedule.due(8, 1001 * kMicrosecond, false));
  EXPECT_TRUE(schedule.due(8, 1001 * kMicrosecond, true));
  EXPECT_FALSE(schedule.leastStridePassed(7));  // the read noted was step 7's
  EXPECT_TRUE(schedule.leastStridePassed(8));
}

TEST(FlatVerdictSchedule, SlowStepsAreRenewedEveryEighthBoundaryAsAMovingLoopIs) {
  // 2 ms steps, 20 us renewals: 512 times the cost passes within 6 steps, the least stride is 8.
  expectEvenlyApart(workOf(verdictSchedule(), 2000 * kMicrosecond, 20 * kMicrosecond, 200), 8);
}

TEST(FlatVerdictSchedule, FastStepsAreRenewedAsOftenAsTheRenewalsCostAllows) {
  // 200 us steps, 10 us renewals: one once 5,120 us have passed, so on every 26th boundary (25
  // steps and the renewal take 5,010 us).
  expectEvenlyApart(workOf(verdictSchedule(), 200 * kMicrosecond, 10 * kMicrosecond, 600), 26);
}

TEST(FlatVerdictSchedule, MovingMemoryIsRenewedEveryEighthBoundaryWhateverTheCost) {
  CostBoundedSchedule schedule = verdictSchedule();
  EXPECT_TRUE(schedule.leastStridePassed(3));     // nothing renewed yet
  schedule.noteDone(20, 0, 1000 * kMicrosecond);  // a renewal that took a millisecond
  EXPECT_FALSE(schedule.leastStridePassed(27));
  EXPECT_TRUE(schedule.leastStridePassed(28));
  EXPECT_FALSE(schedule.due(28, 1001 * kMicrosecond, false));  // flat: its cost not yet earned
}

TEST(FlatVerdictSchedule, VeryFastStepsAreStillRenewedEveryFewDozenBoundaries) {
  expectEvenlyApart(workOf(verdictSchedule(), 10 * kMicrosecond, 10 * kMicrosecond, 1000),
                    verdictSchedule().maxStride());
}

// mallinfo2 walks malloc's free lists: 27 ms a call in a heap of 100,000 free chunks, where the
// resident memory read on every eighth boundary regardless made a loop ten times slower.
TEST(MallocStatisticsSchedule, CheapCallsAreMadeEveryTime) {
  EXPECT_TRUE(mallocStatisticsCallDue(1'000, 0, 0, 0));  // none made yet
  EXPECT_TRUE(mallocStatisticsCallDue(1'000, 900, 2 * kMicrosecond, kMicrosecond));
  EXPECT_TRUE(mallocStatisticsCallDue(1'000, 999, ResidentMemoryReader::kCheapCallNs,
                                      ResidentMemoryReader::kCheapCallNs));
}

TEST(MallocStatisticsSchedule, OneCostlyCallDefersNothing) {
  // The first call in a process is cold; a walk may be slow once.
  constexpr std::int64_t kCostly = 5'000 * kMicrosecond;
  EXPECT_TRUE(mallocStatisticsCallDue(1'000'000, 999'000, kCostly, kMicrosecond));
  EXPECT_TRUE(mallocStatisticsCallDue(1'000'000, 999'000, kMicrosecond, kCostly));
}

TEST(MallocStatisticsSchedule, TwoCostlyCallsInARowDeferTheNextByTheirCost) {
  constexpr std::int64_t kFirst = 30'000 * kMicrosecond, kSecond = 27'000 * kMicrosecond;
  constexpr std::int64_t kEnd = 1'000'000'000;
  const std::int64_t wait = ResidentMemoryReader::kTimePerCallCost * kSecond;  // the cheaper's
  EXPECT_FALSE(mallocStatisticsCallDue(kEnd + 1, kEnd, kSecond, kFirst));
  EXPECT_FALSE(mallocStatisticsCallDue(kEnd + wait - 1, kEnd, kSecond, kFirst));
  EXPECT_TRUE(mallocStatisticsCallDue(kEnd + wait, kEnd, kSecond, kFirst));
}

}  // namespace
}  // namespace memseal::detect
