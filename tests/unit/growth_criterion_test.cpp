// The growth rule on its own: leaks keep survivors from early and recent steps; memory that levels
// off leaves survivors from a few steps or from recent steps only.
#include "detect/growth_criterion.h"

#include <gtest/gtest.h>

#include <numeric>

namespace memseal::detect {
namespace {

std::vector<std::uint32_t> range(std::uint32_t first, std::uint32_t last) {
  std::vector<std::uint32_t> steps(last - first + 1);
  std::iota(steps.begin(), steps.end(), first);
  return steps;
}

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

}  // namespace
}  // namespace memseal::detect
