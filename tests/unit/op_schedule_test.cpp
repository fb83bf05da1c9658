// The steps whose ops are watched with OpWatching::automatic (track/op_sampling.h): every step at
// first, then one in `every` (each with the step after it, so a graph node linked to the step
// before is seen), fewer while the loop keeps repeating, and back to every step when a replay stops
// matching or the detector asks for a closer look.
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

TEST_F(OpSchedule, ALoopThatKeepsRepeatingIsWatchedLessOftenUpToSixteenTimesItsInterval) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  // Every step until step 8; then the interval (counted from step 8) doubles with each watched
  // step: 8, 16, 24, 40, 72, then one in 64 from there on, each with the step after it.
  std::vector<std::uint32_t> expected = {0,  1,  2,  3,  4,  5,  6,   7,   8,   9,   16,  17,
                                         24, 25, 40, 41, 72, 73, 136, 137, 200, 201, 264, 265};
  EXPECT_EQ(watchedSteps(0, 300), expected);
}

TEST_F(OpSchedule, AReplayThatStopsMatchingBringsBackEveryStepThenTheFirstInterval) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  watchedSteps(0, 60);  // stretched to one in 64 by now
  track::noteReplayDiverged();
  // The next 8 steps are watched (the first back-off), then one in 4 again, stretching anew.
  std::vector<std::uint32_t> expected = {61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 77, 78, 85, 86};
  EXPECT_EQ(watchedSteps(61, 90), expected);
}

TEST_F(OpSchedule, AskingForEveryStepEndsTheStretchToo) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  watchedSteps(0, 60);
  track::extendOpScheduleFullPhase(66);
  std::vector<std::uint32_t> expected = {61, 62, 63, 64, 65, 66, 67, 74, 75};
  EXPECT_EQ(watchedSteps(61, 75), expected);
}

TEST_F(OpSchedule, AskingForTheFirstIntervalWatchesSoonWithoutWatchingEveryStep) {
  track::configureOpSchedule(OpWatching::automatic(4), 0);
  watchedSteps(0, 200);  // one in 64: 136, 200 (and 201, its pair)
  track::restartOpScheduleStretch();
  std::vector<std::uint32_t> expected = {201, 204, 205, 208, 209, 216, 217, 232, 233, 264, 265};
  EXPECT_EQ(watchedSteps(201, 300), expected);
}

TEST_F(OpSchedule, OneStepInNIsNotStretched) {
  track::configureOpSchedule(OpWatching::oneStepIn(4), 0);
  std::vector<std::uint32_t> watched = watchedSteps(0, 200);
  ASSERT_EQ(watched.size(), 51u);
  for (std::size_t i = 0; i < watched.size(); ++i) EXPECT_EQ(watched[i], 4 * i);
}

}  // namespace
