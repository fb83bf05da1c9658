// Watched steps reuse the stacks of the thread's last watched step where op, scope and size match
// at the same place (track/step_sites.h): the places themselves, and a tracker whose later watched
// steps unwind nothing until an op differs, whose stack is then captured.
#include "track/step_sites.h"

#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "memseal/tracker.h"
#include "track/stack_capture.h"

// Outside namespace memseal: frames in memseal:: count as memseal's own, not the user's.
__attribute__((noinline)) at::Tensor onesMadeHere(std::int64_t n) { return at::ones({n}); }
__attribute__((noinline)) at::Tensor onesMadeElsewhere(std::int64_t n) { return at::ones({n}); }
__attribute__((noinline)) at::Tensor zerosMadeHere(std::int64_t n) { return at::zeros({n}); }

namespace memseal::track {
namespace {

StepSites::Capture capture(std::uint32_t op, std::uint64_t bytes, std::uint32_t site) {
  return StepSites::Capture{op, op, 0, site, bytes};
}

TEST(StepSites, ACaptureServesTheSameCaptureAtItsPlaceInALaterStep) {
  StepSites sites;
  ASSERT_EQ(sites.nextPlace(1, 1), 0u);
  sites.remember(0, capture(10, 400, 7));
  ASSERT_EQ(sites.nextPlace(1, 1), 1u);
  sites.remember(1, capture(11, 80, 8));
  // The next step numbers its captures from 0 again.
  ASSERT_EQ(sites.nextPlace(2, 1), 0u);
  EXPECT_EQ(sites.siteFor(0, capture(10, 400, 0)), 7u);
  ASSERT_EQ(sites.nextPlace(2, 1), 1u);
  EXPECT_EQ(sites.siteFor(1, capture(11, 80, 0)), 8u);
  // Another op, size or scope at a place is not served; nor is a place never captured.
  EXPECT_EQ(sites.siteFor(1, capture(12, 80, 0)), 0u);
  EXPECT_EQ(sites.siteFor(1, capture(11, 96, 0)), 0u);
  EXPECT_EQ(sites.siteFor(1, StepSites::Capture{11, 11, 3, 0, 80}), 0u);
  EXPECT_EQ(sites.siteFor(2, capture(11, 80, 0)), 0u);
}

TEST(StepSites, AnotherSessionStartsWithNothingRemembered) {
  StepSites sites;
  sites.remember(sites.nextPlace(5, 1), capture(10, 400, 7));
  std::uint32_t place = sites.nextPlace(5, 2);
  EXPECT_EQ(place, 0u);
  EXPECT_EQ(sites.siteFor(place, capture(10, 400, 0)), 0u);
}

TEST(StepSites, AReplacedCaptureServesWhatReplacedIt) {
  StepSites sites;
  sites.remember(sites.nextPlace(1, 1), capture(10, 400, 7));
  sites.remember(sites.nextPlace(2, 1), capture(20, 400, 9));
  std::uint32_t place = sites.nextPlace(3, 1);
  EXPECT_EQ(sites.siteFor(place, capture(10, 400, 0)), 0u);
  EXPECT_EQ(sites.siteFor(place, capture(20, 400, 0)), 9u);
}

bool framesName(const SiteSnapshot& site, const std::string& function) {
  return std::any_of(site.site.frames.begin(), site.site.frames.end(), [&](const StackFrame& f) {
    return f.function.find(function) != std::string::npos;
  });
}

// The site of the allocation made at `step` of `bytes`, or nullptr.
const SiteSnapshot* siteOfStep(const Snapshot& snapshot, std::uint32_t step, std::size_t bytes) {
  for (const SiteSnapshot& site : snapshot.sites) {
    for (const LiveAllocation& allocation : site.allocations) {
      if (allocation.step == step && allocation.bytes == bytes) return &site;
    }
  }
  return nullptr;
}

TEST(StepSites, LaterWatchedStepsUnwindOnlyWhereAnOpDiffers) {
  TrackerOptions options;
  options.stacks = StackMode::kOn;
  options.watch_ops = OpWatching::oneStepIn(2);
  Tracker tracker(options);
  tracker.start();
  std::vector<at::Tensor> kept;
  std::vector<std::uint64_t> unwound;
  for (std::uint32_t step = 0; step <= 6; ++step) {
    setStep(step);
    std::uint64_t before = stacksUnwoundOnThisThread();
    kept.push_back(onesMadeHere(100));
    // The same size on step 6, from another op at another place in the code.
    kept.push_back(step < 6 ? zerosMadeHere(20) : onesMadeElsewhere(20));
    unwound.push_back(stacksUnwoundOnThisThread() - before);
  }
  Snapshot snapshot = tracker.snapshot(16);
  tracker.stop();
  setStep(0);
  EXPECT_GE(unwound[0], 2u);  // the first watched step captures every stack
  for (std::uint32_t step = 1; step < 6; ++step) EXPECT_EQ(unwound[step], 0u) << "step " << step;
  EXPECT_GE(unwound[6], 1u);  // the op that differs
  const SiteSnapshot* first = siteOfStep(snapshot, 0, 400);
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(framesName(*first, "onesMadeHere"));
  for (std::uint32_t step = 1; step <= 6; ++step) {
    EXPECT_EQ(siteOfStep(snapshot, step, 400), first) << "step " << step;
  }
  const SiteSnapshot* zeros = siteOfStep(snapshot, 4, 80);
  ASSERT_NE(zeros, nullptr);
  EXPECT_EQ(zeros->site.outer_op, "aten::zeros");
  EXPECT_TRUE(framesName(*zeros, "zerosMadeHere"));
  const SiteSnapshot* changed = siteOfStep(snapshot, 6, 80);
  ASSERT_NE(changed, nullptr);
  EXPECT_EQ(changed->site.outer_op, "aten::ones");
  EXPECT_TRUE(framesName(*changed, "onesMadeElsewhere"));
  EXPECT_FALSE(framesName(*changed, "zerosMadeHere"));
}

// Ops watched on every step keep a stack per allocation as captured: nothing is reused there.
TEST(StepSites, OpsWatchedOnEveryStepUnwindEveryAllocation) {
  TrackerOptions options;
  options.stacks = StackMode::kOn;
  options.watch_ops = OpWatching::everyStep();
  Tracker tracker(options);
  tracker.start();
  std::vector<at::Tensor> kept;
  for (std::uint32_t step = 0; step < 3; ++step) {
    setStep(step);
    std::uint64_t before = stacksUnwoundOnThisThread();
    kept.push_back(onesMadeHere(100));
    EXPECT_GE(stacksUnwoundOnThisThread() - before, 1u) << "step " << step;
  }
  tracker.stop();
  setStep(0);
}

}  // namespace
}  // namespace memseal::track
