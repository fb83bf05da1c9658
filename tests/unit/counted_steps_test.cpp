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
  options.watch_ops = ops;
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

using Shape = std::vector<std::int64_t>;
using Shapes = std::vector<Shape>;

// The shapes of the live allocations made inside the op user code called, `outer_op`, by step.
std::map<std::uint32_t, Shapes> shapesBy(const memseal::Snapshot& snapshot,
                                         const std::string& outer_op) {
  std::map<std::uint32_t, Shapes> shapes;
  for (const memseal::SiteSnapshot& site : snapshot.sites) {
    const std::string& outer = site.site.outer_op.empty() ? site.site.op : site.site.outer_op;
    if (outer != outer_op) continue;
    for (const memseal::LiveAllocation& allocation : site.allocations) {
      shapes[allocation.step].push_back(allocation.tensor.shape);
    }
  }
  return shapes;
}

// Ops watched on even steps; odd steps replay the last watched one, in iterations of two
// allocations (an `empty` and a `zeros`) as counted steps of `memseal run` are.
class ReplayedSteps : public ::testing::Test {
 protected:
  void SetUp() override {
    memseal::setStep(0);
    tracker_.start();
    memseal::track::setReplayIterationLength(2);
  }
  void TearDown() override {
    memseal::track::setReplayIterationLength(0);
    tracker_.stop();
    memseal::setStep(0);
  }
  void iteration(std::int64_t batch) {
    kept_.push_back(at::empty({batch, 8}));
    kept_.push_back(at::zeros({batch, 8, 2}));
  }
  void keep(const at::Tensor& tensor) { kept_.push_back(tensor); }
  memseal::Snapshot snapshot() { return tracker_.snapshot(64); }

 private:
  memseal::Tracker tracker_{plainOptions(memseal::OpWatching::oneStepIn(2))};
  std::vector<at::Tensor> kept_;
};

TEST_F(ReplayedSteps, AnIterationOfAnotherBatchSizeIsReplayedWithItsOpsAndScaledShapes) {
  iteration(4);
  memseal::setStep(1);
  iteration(2);  // resized alike: both half the recorded size
  memseal::setStep(2);
  iteration(4);
  memseal::setStep(3);
  keep(at::empty({2, 8}));
  keep(at::zeros({3, 8, 2}));  // resized unlike the first: not the recording's
  memseal::Snapshot taken = snapshot();

  auto empty = shapesBy(taken, "aten::empty");
  EXPECT_EQ(empty[1], (Shapes{{2, 8}}));
  auto zeros = shapesBy(taken, "aten::zeros");
  std::string found;
  for (const memseal::SiteSnapshot& site : taken.sites) {
    found += site.site.op + " in " + site.site.outer_op + "; ";
  }
  EXPECT_EQ(zeros[1], (Shapes{{2, 8, 2}})) << found;
  EXPECT_EQ(zeros.count(3), 0u) << found;
}

TEST_F(ReplayedSteps, AStepOfMoreIterationsThanTheRecordedOneReplaysItsIterationsAgain) {
  // The watched step held one iteration; the loop's pace then put two in a step. With counted
  // iterations (a length set) the second replays the recorded one again; without, it is not the
  // recording's and its allocations get no op.
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
  memseal::Snapshot taken = snapshot();

  auto empty = shapesBy(taken, "aten::empty");
  auto zeros = shapesBy(taken, "aten::zeros");
  EXPECT_EQ(empty[1].size(), 2u);
  Shapes step_one = zeros[1];
  std::sort(step_one.begin(), step_one.end());
  EXPECT_EQ(step_one, (Shapes{{2, 8, 2}, {8, 8, 2}}));
  EXPECT_EQ(empty[3].size(), 1u);
  EXPECT_EQ(zeros[3].size(), 1u);
}

}  // namespace
