// The op-loop source's count of its steps, per loop and outside loops, as it gives them for the
// report's lines of where its steps came from (inject/op_loop_step_counts.h; the words are
// report/steps_taken.h's, tested in steps_taken_test.cpp).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "inject/op_loop_step_counts.h"

namespace {

using memseal::inject::FoundLoops;
using memseal::inject::OpLoopFinder;
using memseal::inject::OpLoopStepCounts;
using memseal::report::OpLoopStepsTaken;
using memseal::report::stepsFromLines;

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
  OpLoopStepsTaken taken = counts.stepsTaken(found);
  EXPECT_EQ(taken.steps, 10u);
  EXPECT_EQ(taken.outside_loops, 4u);
  EXPECT_FALSE(taken.handed_over);
  ASSERT_EQ(taken.loops.size(), 2u);
  EXPECT_EQ(taken.loops[0].name, "loop 1 (aten::linear)");
  EXPECT_EQ(taken.loops[0].anchor_op, "aten::linear");
  EXPECT_EQ(taken.loops[0].period, 12u);
  EXPECT_EQ(taken.loops[0].found_after, 120u);
  EXPECT_EQ(taken.loops[0].steps, 5u);
  EXPECT_EQ(taken.loops[0].runs, 1u);
  EXPECT_EQ(taken.loops[1].anchor_op, "aten::conv2d");
  EXPECT_EQ(taken.loops[1].steps, 1u);
  EXPECT_EQ(taken.loops[1].runs, 2u);
  // As the report says it.
  std::vector<std::string> lines = stepsFromLines({taken});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "10 steps in 2 loops found in the program's ops, and 4 outside them (start-up, "
            "between loops)");
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
  OpLoopStepsTaken taken = counts.stepsTaken(found);
  ASSERT_EQ(taken.loops.size(), 2u);
  EXPECT_EQ(taken.loops[0].steps, 4u);
  EXPECT_EQ(taken.loops[0].iterations, 32u);
  EXPECT_EQ(taken.loops[1].iterations, 4u);
  EXPECT_EQ(taken.counted_steps, 3u);
  EXPECT_EQ(taken.allocations_per_iteration, 17u);
  EXPECT_GT(taken.counted_steps_between_checks, 0u);
}

TEST(OpLoopStepCounts, WithoutALoopTheWindowsAndWhyTheyWereTaken) {
  OpLoopStepCounts counts;
  for (int i = 0; i < 7; ++i) counts.stepTaken(std::nullopt);
  FoundLoops found;
  found.windows_because = OpLoopStepsTaken::WindowsBecause::kOpsNeverRepeated;
  found.ops_when_windows_began = 480;
  found.ops_seen = 500;
  found.in_windows = true;
  OpLoopStepsTaken taken = counts.stepsTaken(found);
  EXPECT_TRUE(taken.loops.empty());
  EXPECT_EQ(taken.steps, 7u);
  EXPECT_EQ(taken.outside_loops, 7u);
  EXPECT_EQ(taken.windows_because, OpLoopStepsTaken::WindowsBecause::kOpsNeverRepeated);
  EXPECT_EQ(taken.ops_when_windows_began, 480u);
  EXPECT_EQ(taken.ops_seen, 500u);
  EXPECT_TRUE(taken.in_windows);
  EXPECT_GT(taken.first_window.count(), 0);
  EXPECT_GT(taken.windows_per_run, 0);
}

TEST(OpLoopStepCounts, OnceTheProgramsOwnStepsTookOverTheyAreHistory) {
  OpLoopStepCounts counts;
  counts.handOver();
  EXPECT_TRUE(stepsFromLines({counts.stepsTaken(FoundLoops{})}).empty());  // none taken before
  OpLoopStepCounts before;
  for (int i = 0; i < 3; ++i) before.stepTaken(std::nullopt);
  before.handOver();
  OpLoopStepsTaken taken = before.stepsTaken(FoundLoops{});
  EXPECT_TRUE(taken.handed_over);
  EXPECT_EQ(taken.steps, 3u);
}

}  // namespace
