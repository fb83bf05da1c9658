// The report's lines of where `memseal run` took its steps, from what each step source counted
// (report/steps_taken.h).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "report/steps_taken.h"

namespace {

using memseal::report::NamedCallSteps;
using memseal::report::OpLoopStepsTaken;
using memseal::report::ProgramClockSteps;
using memseal::report::stepsFromLines;
using memseal::report::StepsTaken;
using memseal::report::windowLengthText;
using memseal::report::WindowSteps;
using std::chrono::milliseconds;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

OpLoopStepsTaken::Loop loop(const std::string& anchor, std::uint64_t steps, std::uint64_t runs,
                            std::uint64_t iterations) {
  OpLoopStepsTaken::Loop loop;
  loop.name = "loop 1 (" + anchor + ")";
  loop.anchor_op = anchor;
  loop.period = 12;
  loop.found_after = 120;
  loop.steps = steps;
  loop.runs = runs;
  loop.iterations = iterations;
  return loop;
}

OpLoopStepsTaken inWindows(OpLoopStepsTaken::WindowsBecause because) {
  OpLoopStepsTaken taken;
  taken.windows_because = because;
  taken.ops_when_windows_began = 480;
  taken.in_windows = true;
  taken.first_window = milliseconds(50);
  taken.windows_per_run = 48;
  return taken;
}

TEST(StepsTaken, EachOfTheProgramsClocksIsALineNamingItsPhaseOnlyBesideOthers) {
  ProgramClockSteps optimizer{ProgramClockSteps::Signal::kOptimizerStep, "SGD", "", 599};
  EXPECT_EQ(stepsFromLines({optimizer}),
            std::vector<std::string>{"one step per call of SGD.step() (the program's optimizer), "
                                     "seen through PyTorch's hooks (599 steps)"});
  ProgramClockSteps training{ProgramClockSteps::Signal::kLoaderBatch, "DataLoader over MNIST",
                             "batches (DataLoader over MNIST)", 1};
  ProgramClockSteps serving{ProgramClockSteps::Signal::kModuleCall, "Net", "calls (Net)", 30};
  std::vector<std::string> lines = stepsFromLines({training, serving});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "one step per call of next() on the batches of DataLoader over MNIST, seen through "
            "PyTorch's hooks; phase \"batches (DataLoader over MNIST)\" (1 step)");
  EXPECT_EQ(lines[1],
            "one step per call of Net (the outermost module), seen through PyTorch's hooks; "
            "phase \"calls (Net)\" (30 steps)");
}

TEST(StepsTaken, NamedCallsAndTimeWindowsSayWhatTheUserChose) {
  std::vector<std::string> lines =
      stepsFromLines({NamedCallSteps{"forward", 12}, WindowSteps{milliseconds(5), false, 120},
                      WindowSteps{milliseconds(50), true, 7}});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "one step per outermost call of forward (--step-on) (12 steps)");
  EXPECT_EQ(lines[1], "time windows of 5 ms (--interval) (120 steps)");
  EXPECT_EQ(lines[2], "time windows sized to the run, from 50 ms (7 steps)");
  EXPECT_EQ(windowLengthText(milliseconds(2500)), "2.5 s");
  EXPECT_EQ(windowLengthText(std::chrono::microseconds(250)), "0.25 ms");
}

TEST(StepsTaken, LoopsFoundAreASummaryThenALinePerLoop) {
  OpLoopStepsTaken taken;
  taken.steps = 10;
  taken.outside_loops = 4;
  taken.loops = {loop("aten::linear", 5, 1, 5), loop("aten::mm", 1, 2, 32)};
  std::vector<std::string> lines = stepsFromLines({taken});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "10 steps in 2 loops found in the program's ops, and 4 outside them (start-up, "
            "between loops)");
  EXPECT_EQ(lines[1],
            "loop 1 (aten::linear): one step per call of aten::linear, the op that starts each of "
            "its iterations (12 ops, found after 120 ops): 5 steps in 1 run");
  // Iterations closer together than a step costs were one step: said where there were some.
  EXPECT_TRUE(contains(lines[2],
                       ": 1 step in 2 runs (32 iterations: those closer together than a step "
                       "costs were one step)"))
      << lines[2];
  taken.loops.pop_back();
  taken.outside_loops = 0;
  EXPECT_EQ(stepsFromLines({taken})[0], "10 steps in 1 loop found in the program's ops");
}

TEST(StepsTaken, CountedStepsAndTheWindowsAfterTheLoopsEachHaveALine) {
  OpLoopStepsTaken taken = inWindows(OpLoopStepsTaken::WindowsBecause::kLoopChangedBetweenChecks);
  taken.steps = 9;
  taken.outside_loops = 3;
  taken.loops = {loop("aten::mm", 6, 1, 6)};
  taken.counted_steps = 4;
  taken.allocations_per_iteration = 17;
  taken.counted_steps_between_checks = 64;
  std::vector<std::string> lines = stepsFromLines({taken});
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(contains(lines[0], "and 3 outside them (start-up, between loops, time windows)"))
      << lines[0];
  EXPECT_EQ(lines[2],
            "4 of these steps were ended by counting the loop's allocations (17 an iteration) "
            "instead of following every op, checked against the op that starts each iteration "
            "every 64 steps");
  EXPECT_EQ(lines[3],
            "then time windows sized to the run (50 ms at first, then 1/48 of the time since "
            "tracking started): the loop's ops repeated, but changed between checks");
}

TEST(StepsTaken, WithoutALoopTheWindowsOrWhyNoneWasFound) {
  OpLoopStepsTaken taken = inWindows(OpLoopStepsTaken::WindowsBecause::kOpsNeverRepeated);
  taken.steps = 7;
  EXPECT_EQ(stepsFromLines({taken}),
            std::vector<std::string>{
                "time windows sized to the run (50 ms at first, then 1/48 of the time since "
                "tracking started): the program's outermost ops did not repeat (480 ops seen on "
                "its busiest thread) (7 steps)"});
  OpLoopStepsTaken ended_early;
  ended_early.steps = 1;
  ended_early.ops_seen = 500;
  std::vector<std::string> lines = stepsFromLines({ended_early});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(contains(lines[0], "the program ended before its loop was found (500 outermost ops"))
      << lines[0];
  EXPECT_TRUE(contains(lines[0], "--interval DURATION or --step-on NAME sets the steps (1 step)"))
      << lines[0];
}

TEST(StepsTaken, WhatTheOpLoopsTookBeforeTheProgramsOwnStepsIsOneLineOrNone) {
  OpLoopStepsTaken before;
  before.handed_over = true;
  EXPECT_TRUE(stepsFromLines({before}).empty());
  before.steps = 3;
  ProgramClockSteps optimizer{ProgramClockSteps::Signal::kOptimizerStep, "AdamW", "", 40};
  std::vector<std::string> lines = stepsFromLines({before, optimizer});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "3 steps before the program's own steps began, from time windows");
  EXPECT_TRUE(contains(lines[1], "AdamW.step()")) << lines[1];
  before.loops = {loop("aten::linear", 2, 1, 2)};
  EXPECT_EQ(stepsFromLines({before})[0],
            "3 steps before the program's own steps began, from loops found in its ops");
}

}  // namespace
