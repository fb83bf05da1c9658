// Counted steps (inject/counted_loop_steps.h): when counting starts, the steps it ends, and the
// checks that stop it, against a host that records what it is asked.
#include "inject/counted_loop_steps.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "inject/step_tuning.h"
#include "track/counted_steps.h"
#include "track/thread_state.h"

namespace memseal::inject {
namespace {

using Clock = CountedLoopSteps::Clock;
using namespace std::chrono_literals;

class RecordingHost : public CountedLoopSteps::Host {
 public:
  bool takeCountedStep(Clock::time_point, std::uint64_t iterations) override {
    steps.push_back(iterations);
    return following;
  }
  void afterCountedStep() override { ++after_steps; }
  bool followingLoop() const override { return following; }
  bool loopSettled() override { return settled; }
  void judgeLoopAfresh() override { ++judged_afresh; }
  void setOpCallbackInstalled(bool installed) override { op_callback = installed; }
  Clock::duration minStepGap() override { return Clock::duration::zero(); }
  void watchOps(OpWatching watching) override {
    automatic_watching = watching.mode == OpWatching::Mode::kAuto;
  }

  bool following = true;
  bool settled = true;
  bool op_callback = true;
  bool automatic_watching = false;
  std::vector<std::uint64_t> steps;
  int after_steps = 0;
  int judged_afresh = 0;
};

constexpr std::uint64_t kAllocationsPerIteration = 10;

// Iterations of the loop, each making kAllocationsPerIteration allocations and lasting 1 ms, seen
// at their anchor; whether counting may start after the last.
bool iterations(CountedLoopSteps& counted, Clock::time_point& now, int count,
                std::uint64_t allocations = kAllocationsPerIteration) {
  bool may_start = false;
  for (int i = 0; i < count; ++i) {
    track::threadState().allocation_serial += allocations;
    now += 1ms;
    may_start = counted.countIterationAllocations(now);
  }
  return may_start;
}

TEST(CountedLoopSteps, StartsOnlyOnceIterationsAllocateAlikeInASettledLoop) {
  RecordingHost host;
  CountedLoopSteps counted(host);
  Clock::time_point now = Clock::now();
  EXPECT_FALSE(iterations(counted, now, kEqualIterationsToCount));
  EXPECT_TRUE(iterations(counted, now, 1));
  // One iteration that allocates otherwise starts the count of equal ones again.
  EXPECT_FALSE(iterations(counted, now, 1, kAllocationsPerIteration + 1));
  EXPECT_FALSE(iterations(counted, now, kEqualIterationsToCount - 1));
  EXPECT_TRUE(iterations(counted, now, 1));
  // Not while the loop finder is still judging the loop.
  host.settled = false;
  EXPECT_FALSE(iterations(counted, now, 1));
}

TEST(CountedLoopSteps, EndsStepsOfWholeIterationsUntilACheckAgainstTheAnchorFails) {
  RecordingHost host;
  CountedLoopSteps counted(host);
  counted.watchOpsAutomaticallyWhileCounting();
  Clock::time_point now = Clock::now();
  ASSERT_TRUE(iterations(counted, now, kEqualIterationsToCount + 1));
  counted.start(now);
  EXPECT_TRUE(counted.counting());
  EXPECT_FALSE(host.op_callback);  // the allocator hook ends the steps now
  EXPECT_TRUE(host.automatic_watching);
  EXPECT_EQ(counted.allocationsPerIteration(), kAllocationsPerIteration);
  for (std::uint32_t i = 0; i < kCountedStepsBetweenChecks; ++i) {
    EXPECT_EQ(counted.onBoundary(), kAllocationsPerIteration);  // one iteration a step here
  }
  EXPECT_EQ(host.steps, std::vector<std::uint64_t>(kCountedStepsBetweenChecks, 1));
  EXPECT_EQ(host.after_steps, static_cast<int>(kCountedStepsBetweenChecks));
  EXPECT_EQ(counted.stepsCounted(), kCountedStepsBetweenChecks);
  // A check: the op callback comes back until the anchor is seen on iteration boundaries.
  EXPECT_TRUE(host.op_callback);
  track::threadState().allocation_serial += 3;  // the anchor, three allocations into an iteration
  counted.checkAnchor();
  EXPECT_FALSE(counted.counting());
  EXPECT_TRUE(host.op_callback);
  EXPECT_FALSE(host.automatic_watching);  // every step's ops watched again
  EXPECT_EQ(host.judged_afresh, 1);
  EXPECT_EQ(track::threadState().allocations_until_step, 0u);
  EXPECT_EQ(counted.onBoundary(), 0u);
}

TEST(CountedLoopSteps, StopsWhenTheAnchorNoLongerRunsOrTheLoopIsNoLongerFollowed) {
  RecordingHost host;
  CountedLoopSteps counted(host);
  Clock::time_point now = Clock::now();
  ASSERT_TRUE(iterations(counted, now, kEqualIterationsToCount + 1));
  counted.start(now);
  for (std::uint32_t i = 0; i < kCountedStepsBetweenChecks; ++i) counted.onBoundary();
  ASSERT_TRUE(host.op_callback);  // checking
  std::uint64_t last = 1;
  for (std::uint32_t i = 0; i <= kBoundariesWithoutAnchor && last != 0; ++i) {
    last = counted.onBoundary();
  }
  EXPECT_EQ(last, 0u);
  EXPECT_FALSE(counted.counting());

  RecordingHost left;
  CountedLoopSteps other(left);
  ASSERT_TRUE(iterations(other, now, kEqualIterationsToCount + 1));
  other.start(now);
  left.following = false;  // the loop ended meanwhile
  EXPECT_EQ(other.onBoundary(), 0u);
  EXPECT_TRUE(left.steps.empty());
  track::countStepsOnThisThread(0);
}

}  // namespace
}  // namespace memseal::inject
