// The steps whose ops are watched with OpWatching::automatic (track/op_sampling.h): every step at
// first, then one in `every`, fewer while the loop keeps repeating, and back to every step when a
// replay stops matching or the detector asks for a closer look.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "memseal/tracker.h"
#include "track/op_sampling.h"

namespace {

using memseal::OpWatching;
namespace track = memseal::track;

// The watched steps among [first, last], asking the schedule about each in order.
std::vector<std::uint32_t> watchedSteps(std::uint32_t first, std::uint32_t last) {
  std::vector<std::uint32_t> watched;
  for (std::uint32_t step = first; step <= last; ++step) {
    if (track::opScheduleWatches(step)) watched.push_back(step);
  }
  return watched;
}

class OpSchedule : public ::testing::Test {
 protected:
  void TearDown() override { track::configureOpSchedule(OpWatching::off(), 0); }
};

TEST_F(OpSchedule, ALoopThatKeepsRepeatingIsWatchedLessOftenUpToFourTimesItsInterval) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  // Every step until step 8; then 8, 12, 16 one in 4; the third of those doubles the interval:
  // 24, 32, 40 one in 8; then one in 16 and no further.
  std::vector<std::uint32_t> expected = {0,  1,  2,  3,  4,  5,  6,  7,   8,  12,
                                         16, 24, 32, 40, 56, 72, 88, 104, 120};
  EXPECT_EQ(watchedSteps(0, 120), expected);
}

TEST_F(OpSchedule, AReplayThatStopsMatchingBringsBackEveryStepThenTheFirstInterval) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  watchedSteps(0, 60);  // stretched to one in 16 by now
  track::noteReplayDiverged();
  // The next 8 steps are watched (the first back-off), then one in 4 again.
  std::vector<std::uint32_t> expected = {61, 62, 63, 64, 65, 66, 67, 68, 69, 73, 77};
  EXPECT_EQ(watchedSteps(61, 79), expected);
}

TEST_F(OpSchedule, AskingForEveryStepEndsTheStretchToo) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  watchedSteps(0, 60);
  track::extendOpScheduleFullPhase(66);
  std::vector<std::uint32_t> expected = {61, 62, 63, 64, 65, 66, 70, 74};
  EXPECT_EQ(watchedSteps(61, 75), expected);
}

TEST_F(OpSchedule, OneStepInNIsNotStretched) {
  track::configureOpSchedule(OpWatching::oneStepIn(4), 0);
  std::vector<std::uint32_t> watched = watchedSteps(0, 200);
  ASSERT_EQ(watched.size(), 51u);
  for (std::size_t i = 0; i < watched.size(); ++i) EXPECT_EQ(watched[i], 4 * i);
}

}  // namespace
