// Steps ended by counting a thread's allocations (track/counted_steps.h), and the replay of a step
// whose tensors were resized alike (a batch of another size) against the watched step's recording.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "memseal/tracker.h"
#include "track/counted_steps.h"
#include "track/op_sampling.h"
#include "track/thread_state.h"

namespace {

std::atomic<int> g_boundaries{0};
std::vector<std::uint64_t> g_boundary_serials;  // allocations recorded before each boundary
std::uint64_t countBoundaryEveryThree() {
  g_boundaries.fetch_add(1);
  g_boundary_serials.push_back(memseal::track::threadState().allocation_serial);
  return 3;
}
std::uint64_t countBoundaryAndStop() {
  g_boundaries.fetch_add(1);
  return 0;
}

memseal::TrackerOptions plainOptions(memseal::OpWatching ops) {
  memseal::TrackerOptions options;
  options.stacks = memseal::StackMode::kOff;
  options.observe_ops = ops;
  return options;
}

TEST(CountedSteps, AStepEndsAfterTheCountedAllocationsOfItsOwnThreadOnly) {
  memseal::Tracker tracker(plainOptions(memseal::OpWatching::off()));
  tracker.start();
  g_boundaries = 0;
  g_boundary_serials.clear();
  memseal::track::setCountedStepHandler(&countBoundaryEveryThree);
  std::uint64_t before = memseal::track::threadState().allocation_serial;
  memseal::track::countStepsOnThisThread(3);
  std::vector<at::Tensor> kept;
  // The 3rd, 6th and 9th allocations each begin a step: the handler runs before they are recorded.
  for (int i = 0; i < 10; ++i) kept.push_back(at::empty({16}));
  EXPECT_EQ(g_boundaries.load(), 3);
  EXPECT_EQ(g_boundary_serials, (std::vector<std::uint64_t>{before + 2, before + 5, before + 8}));
  std::thread other([] {
    std::vector<at::Tensor> elsewhere;
    for (int i = 0; i < 10; ++i) elsewhere.push_back(at::empty({16}));
  });
  other.join();
  EXPECT_EQ(g_boundaries.load(), 3);
  // The handler's 0 stops the count.
  memseal::track::setCountedStepHandler(&countBoundaryAndStop);
  for (int i = 0; i < 10; ++i) kept.push_back(at::empty({16}));
  EXPECT_EQ(g_boundaries.load(), 4);
  memseal::track::setCountedStepHandler(nullptr);
  tracker.stop();
}

// How many live allocations each step made inside the op user code called, `outer_op`.
std::map<std::uint32_t, int> countsBy(const memseal::Snapshot& snapshot,
                                      const std::string& outer_op) {
  std::map<std::uint32_t, int> counts;
  for (const memseal::SiteSnapshot& site : snapshot.sites) {
    const std::string& outer = site.site.outer_op.empty() ? site.site.op : site.site.outer_op;
    if (outer != outer_op) continue;
    for (const memseal::LiveAllocation& allocation : site.allocations) ++counts[allocation.step];
  }
  return counts;
}

// Shape of the live allocations made inside the op user code called, `outer_op`, by step.
std::map<std::uint32_t, std::vector<std::int64_t>> shapesBy(const memseal::Snapshot& snapshot,
                                                            const std::string& outer_op) {
  std::map<std::uint32_t, std::vector<std::int64_t>> shapes;
  for (const memseal::SiteSnapshot& site : snapshot.sites) {
    const std::string& outer = site.site.outer_op.empty() ? site.site.op : site.site.outer_op;
    if (outer != outer_op) continue;
    for (const memseal::LiveAllocation& allocation : site.allocations) {
      shapes[allocation.step] = allocation.tensor.shape;
    }
  }
  return shapes;
}

TEST(CountedSteps, AnIterationOfAnotherBatchSizeIsReplayedWithItsOpsAndScaledShapes) {
  // Ops watched on even steps; odd steps replay the last watched one.
  memseal::Tracker tracker(plainOptions(memseal::OpWatching::oneStepIn(2)));
  memseal::setStep(0);
  tracker.start();
  memseal::track::setReplayIterationLength(2);
  std::vector<at::Tensor> kept;
  auto iteration = [&](std::int64_t batch) {
    kept.push_back(at::empty({batch, 8}));
    kept.push_back(at::zeros({batch, 8, 2}));
  };
  iteration(4);
  memseal::setStep(1);
  iteration(2);  // resized alike: both half the recorded size
  memseal::setStep(2);
  iteration(4);
  memseal::setStep(3);
  kept.push_back(at::empty({2, 8}));
  kept.push_back(at::zeros({3, 8, 2}));  // resized unlike the first: not the recording's
  memseal::Snapshot snapshot = tracker.snapshot(16);
  memseal::track::setReplayIterationLength(0);
  tracker.stop();
  memseal::setStep(0);

  auto empty = shapesBy(snapshot, "aten::empty");
  ASSERT_EQ(empty.count(1), 1u);
  EXPECT_EQ(empty[1], (std::vector<std::int64_t>{2, 8}));
  auto zeros = shapesBy(snapshot, "aten::zeros");
  std::string found;
  for (const memseal::SiteSnapshot& site : snapshot.sites) {
    found += site.site.op + " in " + site.site.outer_op + "; ";
  }
  ASSERT_EQ(zeros.count(1), 1u) << found;
  EXPECT_EQ(zeros[1], (std::vector<std::int64_t>{2, 8, 2}));
  EXPECT_EQ(zeros.count(3), 0u) << found;
}

TEST(CountedSteps, AStepOfMoreIterationsThanTheRecordedOneReplaysItsIterationsAgain) {
  // The watched step held one iteration; the loop's pace then put two in a step. With counted
  // iterations (a length set) the second replays the recorded one again; without, it is not the
  // recording's and its allocations get no op.
  memseal::Tracker tracker(plainOptions(memseal::OpWatching::oneStepIn(2)));
  memseal::setStep(0);
  tracker.start();
  memseal::track::setReplayIterationLength(2);
  std::vector<at::Tensor> kept;
  auto iteration = [&](std::int64_t batch) {
    kept.push_back(at::empty({batch, 8}));
    kept.push_back(at::zeros({batch, 8, 2}));
  };
  iteration(4);
  memseal::setStep(1);
  iteration(2);
  iteration(8);  // past the recording's end: its one iteration again, resized alike
  memseal::setStep(2);
  iteration(4);
  memseal::track::setReplayIterationLength(0);
  memseal::setStep(3);
  iteration(4);
  iteration(4);  // not counted iterations: past the end of the recording is no replay
  memseal::Snapshot snapshot = tracker.snapshot(64);
  tracker.stop();
  memseal::setStep(0);

  auto empty = countsBy(snapshot, "aten::empty");
  auto zeros = countsBy(snapshot, "aten::zeros");
  EXPECT_EQ(empty[1], 2);
  EXPECT_EQ(zeros[1], 2);
  std::vector<std::vector<std::int64_t>> step_one_zeros;
  for (const memseal::SiteSnapshot& site : snapshot.sites) {
    if (site.site.op != "aten::zeros" && site.site.outer_op != "aten::zeros") continue;
    for (const memseal::LiveAllocation& allocation : site.allocations) {
      if (allocation.step == 1) step_one_zeros.push_back(allocation.tensor.shape);
    }
  }
  EXPECT_NE(
      std::find(step_one_zeros.begin(), step_one_zeros.end(), std::vector<std::int64_t>{8, 8, 2}),
      step_one_zeros.end());
  EXPECT_EQ(empty[3], 1);
  EXPECT_EQ(zeros[3], 1);
}

}  // namespace
