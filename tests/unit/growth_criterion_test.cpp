// The growth rule on its own: leaks keep survivors from early and recent steps; memory that levels
// off leaves survivors from a few steps or from recent steps only.
#include "detect/growth_criterion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "step_range.h"

namespace memseal::detect {
namespace {

using test::range;

TEST(SurvivorsKeepGrowing, EveryStepLeavingASurvivorIsALeak) {
  EXPECT_TRUE(survivorsKeepGrowing(range(5, 24), 5, 24));
  EXPECT_TRUE(survivorsKeepGrowing(range(5, 8), 5, 8));  // earliest decision: 4 steps
}

TEST(SurvivorsKeepGrowing, TooFewStepsIsNeverALeak) {
  EXPECT_FALSE(survivorsKeepGrowing(range(5, 7), 5, 7));
}

TEST(SurvivorsKeepGrowing, OneTimeAllocationIsNotALeak) {
  EXPECT_FALSE(survivorsKeepGrowing({5}, 5, 24));
}

TEST(SurvivorsKeepGrowing, SlidingWindowOfABoundedCacheIsNotALeak) {
  EXPECT_FALSE(survivorsKeepGrowing(range(21, 24), 5, 24));
  EXPECT_FALSE(survivorsKeepGrowing(range(12, 24), 5, 24));  // nothing from the first quarter
}

TEST(SurvivorsKeepGrowing, SurvivorsThatStoppedComingAreNotALeak) {
  EXPECT_FALSE(survivorsKeepGrowing(range(5, 18), 5, 24));  // nothing from the last quarter
}

TEST(SurvivorsKeepGrowing, MostStepsWithGapsIsStillALeak) {
  std::vector<std::uint32_t> steps = range(5, 24);
  steps.erase(steps.begin() + 3);
  steps.erase(steps.begin() + 10);
  EXPECT_TRUE(survivorsKeepGrowing(steps, 5, 24));
}

TEST(SteadyGrowth, LinearGrowthReportsItsSlope) {
  std::vector<std::int64_t> samples;
  for (int i = 0; i < 20; ++i) samples.push_back(1000000 + i * 100000);
  EXPECT_NEAR(steadyGrowthPerStep(samples, 64 * 1024), 100000.0, 1e-6);
}

TEST(SteadyGrowth, PlateauAndSmallGrowthAreNotGrowth) {
  std::vector<std::int64_t> plateau;
  for (int i = 0; i < 20; ++i) plateau.push_back(i < 8 ? i * 500000 : 4000000);
  EXPECT_EQ(steadyGrowthPerStep(plateau, 64 * 1024), 0.0);
  std::vector<std::int64_t> small;
  for (int i = 0; i < 20; ++i) small.push_back(i * 4096);
  EXPECT_EQ(steadyGrowthPerStep(small, 64 * 1024), 0.0);
  EXPECT_EQ(steadyGrowthPerStep({1, 2, 3}, 0), 0.0);
}

TEST(SteadyGrowth, SamplesTakenEveryFewStepsGiveTheSlopePerStep) {
  // Resident memory read on every fourth step while it grows 100 kB a step.
  std::vector<std::uint32_t> steps;
  std::vector<std::int64_t> samples;
  for (std::uint32_t step = 10; step < 90; step += 4) {
    steps.push_back(step);
    samples.push_back(1000000 + static_cast<std::int64_t>(step) * 100000);
  }
  EXPECT_NEAR(steadyGrowthPerStep(steps, samples, 64 * 1024), 100000.0, 1e-6);
  // 40 kB a step is 160 kB between two readings: below the per-step threshold all the same.
  for (std::size_t i = 0; i < samples.size(); ++i) samples[i] = steps[i] * 40000;
  EXPECT_EQ(steadyGrowthPerStep(steps, samples, 64 * 1024), 0.0);
  // Levelling off still shows as a flat second half.
  for (std::size_t i = 0; i < samples.size(); ++i) {
    samples[i] = std::min<std::int64_t>(steps[i], 40) * 500000;
  }
  EXPECT_EQ(steadyGrowthPerStep(steps, samples, 64 * 1024), 0.0);
  EXPECT_EQ(steadyGrowthPerStep({1, 2, 3, 4, 5, 6}, {1, 2, 3}, 0), 0.0);  // mismatched lengths
}

TEST(SurvivorsSpanTheRun, ALeakOnEveryOtherStepSpansTheRun) {
  std::vector<std::uint32_t> even;
  for (std::uint32_t step = 6; step <= 24; step += 2) even.push_back(step);
  EXPECT_FALSE(survivorsKeepGrowing(even, 5, 24));  // too few steps for the strict rule
  EXPECT_TRUE(survivorsSpanTheRun(even, 5, 24));
}

TEST(SurvivorsSpanTheRun, SurvivorsMissingFromAQuarterDoNotSpanIt) {
  std::vector<std::uint32_t> early_and_late = {5, 6, 7, 8, 9, 20, 21, 22, 23, 24};
  EXPECT_FALSE(survivorsSpanTheRun(early_and_late, 5, 24));   // nothing in the middle quarters
  EXPECT_FALSE(survivorsSpanTheRun({5, 12, 18, 24}, 5, 24));  // fewer than a quarter of the steps
  EXPECT_FALSE(survivorsSpanTheRun(range(5, 10), 5, 10));     // too few steps observed
}

std::vector<std::uint32_t> stepsOf(std::size_t count, std::uint32_t first = 5) {
  return range(first, first + static_cast<std::uint32_t>(count) - 1);
}

TEST(SteadyTensorGrowth, GrowthOnSomeStepsOnlyIsSteady) {
  std::vector<std::int64_t> live;
  for (int i = 0; i < 20; ++i) live.push_back(1000 + (i / 2) * 1024);  // every other step
  EXPECT_NEAR(steadyTensorGrowthPerStep(stepsOf(20), live), 512, 60);
}

TEST(SteadyTensorGrowth, MemoryThatLevelsOffOrFallsBackIsNot) {
  std::vector<std::int64_t> bounded;
  for (int i = 0; i < 20; ++i) bounded.push_back(std::min(i, 6) * 1024);  // a cache, then full
  EXPECT_EQ(steadyTensorGrowthPerStep(stepsOf(20), bounded), 0.0);
  std::vector<std::int64_t> sawtooth;
  for (int i = 0; i < 20; ++i) sawtooth.push_back((i % 5) * 1024);  // filled and cleared
  EXPECT_EQ(steadyTensorGrowthPerStep(stepsOf(20), sawtooth), 0.0);
  std::vector<std::int64_t> dropped;
  for (int i = 0; i < 20; ++i) dropped.push_back(i < 19 ? i * 1024 : 0);  // cleared at the end
  EXPECT_EQ(steadyTensorGrowthPerStep(stepsOf(20), dropped), 0.0);
  EXPECT_EQ(steadyTensorGrowthPerStep(stepsOf(5), {1, 2, 3, 4, 5}), 0.0);  // too few samples
}

TEST(SteadyTensorGrowth, AnotherThreadsWorkInFlightWhosePeaksRiseIsNot) {
  // A healthy server with a second worker: at each boundary of the first, the second is somewhere
  // in its request (none, half or all of its tensors live). Its peaks happen to rise from quarter
  // to quarter and the last boundary catches one, but the level it returns to stays.
  constexpr std::int64_t kHeld = 4 << 20;
  std::vector<std::int64_t> live;
  for (int i = 0; i < 40; ++i) {
    std::int64_t request_bytes = 30000 + 1000 * (i / 10);
    live.push_back(kHeld + ((i + 2) % 3) * request_bytes / 2);
  }
  EXPECT_EQ(steadyTensorGrowthPerStep(stepsOf(40), live), 0.0);
  // The same in flight above a held level that rises: growth.
  std::vector<std::int64_t> leaking = live;
  for (int i = 0; i < 40; ++i) leaking[i] += i * 512;
  EXPECT_NEAR(steadyTensorGrowthPerStep(stepsOf(40), leaking), 512, 200);
}

// Resident samples of `steps` steps: a base, plus `slope` per step, plus a deterministic wobble of
// +-`noise` (a page-granular, allocator-shaped line).
std::vector<std::int64_t> residentLine(std::size_t steps, double slope, std::int64_t noise) {
  std::vector<std::int64_t> samples;
  std::uint32_t state = 12345;
  for (std::size_t i = 0; i < steps; ++i) {
    state = state * 1103515245u + 12345u;
    std::int64_t wobble = static_cast<std::int64_t>((state >> 8) % (2 * noise + 1)) - noise;
    samples.push_back(400 * 1024 * 1024 + static_cast<std::int64_t>(slope * i) + wobble);
  }
  return samples;
}

TEST(UnboundedGrowth, APagePerStepOverALongRunIsFound) {
  std::vector<std::int64_t> samples = residentLine(2000, 4096, 64 * 1024);
  double slope = unboundedGrowthPerStep(stepsOf(2000), samples, 1024 * 1024);
  EXPECT_NEAR(slope, 4096, 200);
  // The fast rule, built for large growth, misses it.
  EXPECT_EQ(steadyGrowthPerStep(samples, 64 * 1024), 0.0);
}

TEST(UnboundedGrowth, OscillationLevellingOffAndShortRunsAreNot) {
  std::vector<std::int64_t> oscillating = residentLine(2000, 0, 4 * 1024 * 1024);
  EXPECT_EQ(unboundedGrowthPerStep(stepsOf(2000), oscillating, 1024 * 1024), 0.0);
  std::vector<std::int64_t> levelling;
  for (int i = 0; i < 2000; ++i) levelling.push_back(std::min(i, 300) * 16384);  // a cache fills
  EXPECT_EQ(unboundedGrowthPerStep(stepsOf(2000), levelling, 1024 * 1024), 0.0);
  std::vector<std::int64_t> logarithmic;  // slows down but never quite stops
  for (int i = 0; i < 2000; ++i) {
    logarithmic.push_back(static_cast<std::int64_t>(std::log(1.0 + i) * 1024 * 1024));
  }
  EXPECT_EQ(unboundedGrowthPerStep(stepsOf(2000), logarithmic, 1024 * 1024), 0.0);
  std::vector<std::int64_t> short_run = residentLine(150, 16384, 0);
  EXPECT_EQ(unboundedGrowthPerStep(stepsOf(150), short_run, 1024 * 1024), 0.0);
  std::vector<std::int64_t> tiny = residentLine(2000, 100, 0);  // 200 KB in all
  EXPECT_EQ(unboundedGrowthPerStep(stepsOf(2000), tiny, 1024 * 1024), 0.0);
}

// A slow creep that stays under the total, then one large rise at the last sample (the program's
// end, or a data set loaded late): not unbounded growth. The same rise beside a real leak is no
// excuse for it.
TEST(UnboundedGrowth, OneLargeRiseIsNotGrowthThatKeepsGoing) {
  std::vector<std::int64_t> creep_then_jump;
  for (int i = 0; i < 320; ++i) creep_then_jump.push_back(i * 1800);  // 0.55 MiB in all
  creep_then_jump.back() += 2 * 1024 * 1024;
  EXPECT_EQ(unboundedGrowthPerStep(stepsOf(320), creep_then_jump, 1024 * 1024), 0.0);
  std::vector<std::int64_t> leak_and_jump = residentLine(2000, 4096, 64 * 1024);
  leak_and_jump.back() += 2 * 1024 * 1024;
  EXPECT_GT(unboundedGrowthPerStep(stepsOf(2000), leak_and_jump, 1024 * 1024), 3000.0);
}

// A leak of 4 KiB a step, and once a 40 MiB array loaded beside it (a notebook cell, a data set):
// the leak's cost per step is its own. A leak that grows in a few large chunks keeps its slope.
TEST(SlopeWithoutOneJump, OneLargeRiseIsNotAStepsCost) {
  std::vector<std::int64_t> leak_and_jump = residentLine(200, 4096, 0);
  for (std::size_t i = 120; i < leak_and_jump.size(); ++i) leak_and_jump[i] += 40 << 20;
  EXPECT_GT(slopeOf(stepsOf(200), leak_and_jump), 100.0 * 1024);
  EXPECT_NEAR(slopeWithoutOneJump(stepsOf(200), leak_and_jump), 4096.0, 1.0);
  std::vector<std::int64_t> chunks(200);
  for (std::size_t i = 0; i < chunks.size(); ++i)
    chunks[i] = static_cast<std::int64_t>(i / 50) << 20;
  EXPECT_NEAR(slopeWithoutOneJump(stepsOf(200), chunks), slopeOf(stepsOf(200), chunks), 1e-9);
  EXPECT_EQ(slopeWithoutOneJump({3}, {10}), 0.0);
}

TEST(SlopeOf, UsesTheStepsNotThePositions) {
  // Thinned samples: steps 0, 2, 4, then 5, 6, 7 with one unit per step.
  EXPECT_NEAR(slopeOf({0, 2, 4, 5, 6, 7}, {0, 2, 4, 5, 6, 7}), 1.0, 1e-9);
  EXPECT_EQ(slopeOf({3}, {10}), 0.0);
}

}  // namespace
}  // namespace memseal::detect
