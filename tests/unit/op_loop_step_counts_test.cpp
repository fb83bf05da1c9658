// The op-loop source's count of its steps, per loop and outside loops, and how the report says
// where its steps came from (inject/op_loop_step_counts.h).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "inject/op_loop_step_counts.h"

namespace {

using memseal::inject::FoundLoops;
using memseal::inject::OpLoopFinder;
using memseal::inject::OpLoopStepCounts;

OpLoopFinder::Loop loopNamed(const std::string& name, std::size_t period, std::uint32_t runs) {
  OpLoopFinder::Loop loop;
  loop.name = name;
  loop.period = period;
  loop.found_after = 10 * period;
  loop.runs = runs;
  return loop;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OpLoopStepCounts, StepsCountInTheirLoopOrOutsideLoops) {
  std::vector<OpLoopFinder::Loop> loops = {loopNamed("loop 1 (aten::linear)", 12, 1),
                                           loopNamed("loop 2 (aten::conv2d)", 30, 2)};
  OpLoopStepCounts counts;
  counts.stepTaken(std::nullopt);  // start-up, before any loop was found
  counts.stepTaken(0);             // a loop the counts do not know yet: outside
  counts.loopsFound(2);
  for (int i = 0; i < 5; ++i) counts.stepTaken(0);
  for (int i = 0; i < 3; ++i) counts.stepTaken(1);
  // The newest 2 steps of loop 2 belonged to a phase found after them.
  counts.moveOutOfLoop(1, 2);
  EXPECT_EQ(counts.taken(), 10u);
  EXPECT_EQ(counts.seen(), 10u);
  FoundLoops found;
  found.loops = &loops;
  found.anchor_names = {"aten::linear", "aten::conv2d"};
  std::vector<std::string> lines = counts.description(found);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "10 steps in 2 loops found in the program's ops, and 4 outside them (start-up, "
            "between loops)");
  EXPECT_TRUE(contains(lines[1], "loop 1 (aten::linear): one step per call of aten::linear"))
      << lines[1];
  EXPECT_TRUE(contains(lines[1], "(12 ops, found after 120 ops): 5 steps in 1 run")) << lines[1];
  EXPECT_TRUE(contains(lines[2], ": 1 step in 2 runs")) << lines[2];
}

TEST(OpLoopStepCounts, IterationsCloserTogetherThanAStepCostsAreOneStep) {
  std::vector<OpLoopFinder::Loop> loops = {loopNamed("loop 1 (aten::mm)", 4, 1),
                                           loopNamed("loop 2 (aten::add)", 4, 1)};
  OpLoopStepCounts counts;
  counts.loopsFound(2);
  for (int i = 0; i < 4; ++i) {
    counts.iterated(0, 8);  // a counted step ends several iterations
    counts.stepTaken(0);
    counts.iterated(1, 1);
    counts.stepTaken(1);
  }
  auto ratios = counts.iterationsPerStep(loops);
  ASSERT_EQ(ratios.size(), 1u);  // loop 2's steps are one iteration each
  EXPECT_EQ(ratios[0].first, "loop 1 (aten::mm)");
  EXPECT_DOUBLE_EQ(ratios[0].second, 8.0);
  FoundLoops found;
  found.loops = &loops;
  found.anchor_names = {"aten::mm", "aten::add"};
  found.counted_steps = 3;
  found.allocations_per_iteration = 17;
  std::vector<std::string> lines = counts.description(found);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(contains(lines[1],
                       "(32 iterations: those closer together than a step costs were "
                       "one step)"))
      << lines[1];
  EXPECT_FALSE(contains(lines[2], "iterations:")) << lines[2];
  EXPECT_TRUE(contains(lines[3],
                       "3 of these steps were ended by counting the loop's allocations "
                       "(17 an iteration)"))
      << lines[3];
}

TEST(OpLoopStepCounts, WithoutALoopTheWindowsOrWhyNoneWasFound) {
  OpLoopStepCounts counts;
  for (int i = 0; i < 7; ++i) counts.stepTaken(std::nullopt);
  FoundLoops found;
  found.windows = "time windows: no loop in 500 ops";
  found.ops_seen = 500;
  found.in_windows = true;
  std::vector<std::string> lines = counts.description(found);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "time windows: no loop in 500 ops (7 steps)");
  found.in_windows = false;
  lines = counts.description(found);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(contains(lines[0], "the program ended before its loop was found (500 outermost ops"))
      << lines[0];
}

TEST(OpLoopStepCounts, OnceTheProgramsOwnStepsTookOverTheyAreHistory) {
  OpLoopStepCounts counts;
  counts.handOver();
  EXPECT_TRUE(counts.description(FoundLoops{}).empty());  // none taken before
  OpLoopStepCounts before;
  for (int i = 0; i < 3; ++i) before.stepTaken(std::nullopt);
  before.handOver();
  std::vector<std::string> lines = before.description(FoundLoops{});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "3 steps before the program's own steps began, from time windows");
}

}  // namespace
