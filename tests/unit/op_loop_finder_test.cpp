// The op-loop finder of `memseal run` (inject/op_loop_finder.h), fed the outermost ops of programs
// that loop: which loop it follows, from which op, when it decides that the loop ended, and when it
// gives up for time windows.
#include "inject/op_loop_finder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace memseal::inject {
namespace {

using Decision = OpLoopFinder::Decision;
using namespace std::chrono_literals;

constexpr std::uint64_t kMainThread = 1;

// A program's ops fed to the finder as OpLoopSteps feeds them: learned until a loop is found,
// then checked against the loop it follows. The clock moves a millisecond an op.
class Program {
 public:
  Program() : finder_({10s, 60s}) {}

  // Runs `iteration` `times` times; the decisions made, in order.
  std::vector<Decision> run(const std::vector<std::string>& iteration, int times,
                            const std::vector<std::int64_t>& live = {}) {
    std::vector<Decision> decisions;
    for (int i = 0; i < times; ++i) {
      for (std::size_t j = 0; j < iteration.size(); ++j) {
        std::optional<Decision> decision = op(iteration[j], live.empty() ? 0 : live[j]);
        if (decision) decisions.push_back(*decision);
      }
    }
    return decisions;
  }

  std::optional<Decision> op(const std::string& name, std::int64_t live = 0) {
    now_ += 1ms;
    std::optional<Decision> decision;
    if (following_) {
      decision = finder_.checkLoopStillRepeats(name.c_str(), kMainThread, steps_).decision;
      if (finder_.anchorName() == name) ++steps_;
    } else if (windows_) {
      decision = finder_.recogniseInWindows(name.c_str(), kMainThread);
    } else {
      decision = finder_.learn(name.c_str(), kMainThread, live, now_);
    }
    if (decision) {
      following_ = decision->next == Decision::Next::kFollowLoop;
      windows_ = decision->next == Decision::Next::kWindows;
    }
    return decision;
  }

  OpLoopFinder& finder() { return finder_; }
  std::chrono::steady_clock::time_point now() const { return now_; }
  bool following() const { return following_; }

 private:
  OpLoopFinder finder_;
  std::chrono::steady_clock::time_point now_{};
  bool following_ = false;
  bool windows_ = false;
  std::uint64_t steps_ = 0;
};

std::vector<std::string> startUp(int ops) {
  std::vector<std::string> names;
  for (int i = 0; i < ops; ++i) names.push_back("start_up_" + std::to_string(i));
  return names;
}

const std::vector<std::string> kTrainingIteration = {"aten::embedding",    "aten::linear",
                                                     "aten::relu",         "aten::mse_loss",
                                                     "autograd::backward", "aten::zero_"};
const std::vector<std::string> kValidationIteration = {"aten::embedding", "aten::linear",
                                                       "aten::argmax", "aten::eq"};

TEST(OpLoopFinder, FollowsATrainingLoopFromTheOpWhereTheLeastMemoryIsLive) {
  Program program;
  EXPECT_TRUE(program.run(startUp(20), 1).empty());
  // Memory rises through the forward pass and falls once the gradients are zeroed.
  std::vector<Decision> decisions =
      program.run(kTrainingIteration, 60, {300, 400, 500, 600, 700, 100});
  ASSERT_EQ(decisions.size(), 1u);
  const Decision* decision = &decisions[0];
  EXPECT_EQ(decision->next, Decision::Next::kFollowLoop);
  EXPECT_EQ(decision->detector_phase, "loop 1 (aten::zero_)");
  EXPECT_TRUE(decision->end_step);
  EXPECT_FALSE(decision->phase_first);
  EXPECT_EQ(decision->loop, 0u);
  EXPECT_EQ(decision->loop_thread, kMainThread);
  EXPECT_EQ(program.finder().anchorName(), "aten::zero_");
  ASSERT_EQ(program.finder().loops().size(), 1u);
  EXPECT_EQ(program.finder().loops()[0].period, kTrainingIteration.size());
  // Iterations that keep matching keep the loop.
  EXPECT_TRUE(program.run(kTrainingIteration, 200).empty());
  EXPECT_TRUE(program.finder().settled());
  program.finder().judgeAfresh();
  EXPECT_FALSE(program.finder().settled());
}

TEST(OpLoopFinder, ALoopEndsWhenItsAnchorStopsAndTheNextLoopIsLearned) {
  Program program;
  program.run(kTrainingIteration, 60);
  ASSERT_TRUE(program.following());
  std::vector<Decision> decisions = program.run(kValidationIteration, 60);
  ASSERT_EQ(decisions.size(), 2u);
  const Decision& ended = decisions[0];
  EXPECT_EQ(ended.next, Decision::Next::kLearning);
  EXPECT_EQ(ended.detector_phase, "outside loops");
  EXPECT_TRUE(ended.end_step);
  EXPECT_TRUE(ended.phase_first);  // the step running now was already the next phase's
  const Decision& next = decisions[1];
  EXPECT_EQ(next.next, Decision::Next::kFollowLoop);
  EXPECT_EQ(next.loop, 1u);
  EXPECT_EQ(next.detector_phase.rfind("loop 2 (", 0), 0u);
  EXPECT_EQ(program.finder().loops()[1].period, kValidationIteration.size());
}

TEST(OpLoopFinder, ALoopFoundBeforeIsRecognisedWithinAFewIterations) {
  Program program;
  program.run(kTrainingIteration, 60);
  program.run(kValidationIteration, 120);
  ASSERT_EQ(program.finder().loops().size(), 2u);
  // Training again: the validation loop ends, and training is known after two iterations, long
  // before a checkpoint could find it.
  std::vector<Decision> decisions = program.run(kTrainingIteration, 10);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].next, Decision::Next::kLearning);
  EXPECT_EQ(decisions[1].next, Decision::Next::kFollowLoop);
  EXPECT_EQ(decisions[1].loop, 0u);
  EXPECT_EQ(program.finder().loops().size(), 2u);
  EXPECT_EQ(program.finder().loops()[0].runs, 2u);
}

TEST(OpLoopFinder, OpsThatNeverRepeatGiveTimeWindowsOnlyOnceLearningHasLastedTooLong) {
  Program program;
  EXPECT_TRUE(program.run(startUp(500), 1).empty());
  OpLoopFinder& finder = program.finder();
  // Few ops: ten seconds are not enough (a slow program's loop may not have run often yet).
  EXPECT_FALSE(finder.decideIfTimeIsUp(program.now() + 11s));
  std::optional<Decision> windows = finder.decideIfTimeIsUp(program.now() + 61s);
  ASSERT_TRUE(windows);
  EXPECT_EQ(windows->next, Decision::Next::kWindows);
  EXPECT_FALSE(windows->ops_needed);  // no loop to watch for: the op callback can go
  EXPECT_EQ(finder.windowsBecause(),
            memseal::report::OpLoopStepsTaken::WindowsBecause::kOpsNeverRepeated);
  EXPECT_EQ(finder.opsWhenWindowsBegan(), 500u);
}

TEST(OpLoopFinder, InTimeWindowsALoopFoundBeforeStillBecomesTheStepWhenItRunsAgain) {
  Program program;
  program.run(kTrainingIteration, 60);
  program.run(startUp(40), 1);  // the loop ended: learning again
  ASSERT_FALSE(program.following());
  program.run(startUp(300), 1);
  std::optional<Decision> windows = program.finder().decideIfTimeIsUp(program.now() + 61s);
  ASSERT_TRUE(windows);
  EXPECT_EQ(windows->detector_phase, "time windows");
  EXPECT_TRUE(windows->ops_needed);
  EXPECT_EQ(program.finder().recogniseInWindows("aten::zero_", kMainThread), std::nullopt);
  std::optional<Decision> recognised;
  for (int i = 0; i < 3 && !recognised; ++i) {
    for (const std::string& name : kTrainingIteration) {
      if (!recognised) recognised = program.finder().recogniseInWindows(name.c_str(), kMainThread);
    }
  }
  ASSERT_TRUE(recognised);
  EXPECT_EQ(recognised->loop, 0u);
}

// A recurrent model's forward pass loops over time steps inside the training iteration: the
// time steps are never the step, whether each sequence has as many of them or not.
std::vector<std::string> recurrentIteration(int time_steps) {
  std::vector<std::string> ops = {"aten::embedding"};
  for (int t = 0; t < time_steps; ++t) {
    ops.insert(ops.end(), {"aten::mul", "aten::add", "aten::tanh"});
  }
  ops.insert(ops.end(), {"aten::nll_loss", "autograd::backward", "aten::add_", "aten::zero_"});
  return ops;
}

TEST(OpLoopFinder, TimeStepsInsideTheIterationAreNotTheLoop) {
  Program program;
  program.run(startUp(20), 1);
  program.run(recurrentIteration(12), 300);
  ASSERT_TRUE(program.following());
  ASSERT_FALSE(program.finder().loops().empty());
  EXPECT_EQ(program.finder().loops().back().period, recurrentIteration(12).size());
  EXPECT_NE(program.finder().anchorName(), "aten::mul");
}

TEST(OpLoopFinder, TimeStepsOfSequencesOfVaryingLengthAreNotTheStep) {
  Program program;
  program.run(startUp(20), 1);
  const int lengths[] = {9, 12, 7, 14, 10, 11, 8, 13};
  for (int i = 0; i < 200; ++i) program.run(recurrentIteration(lengths[i % 8]), 1);
  // The time steps were taken for the loop at first, until their runs, of several lengths, were
  // broken again and again by the rest of the iteration; that iteration is the loop now, each run
  // of time steps in it one op.
  const std::vector<OpLoopFinder::Loop>& loops = program.finder().loops();
  ASSERT_EQ(loops.size(), 2u);
  EXPECT_TRUE(loops[0].inner);
  EXPECT_FALSE(loops[1].inner);
  ASSERT_TRUE(program.following());
  const std::vector<std::string> outer = {"aten::embedding", "aten::nll_loss", "autograd::backward",
                                          "aten::add_", "aten::zero_"};
  EXPECT_NE(std::find(outer.begin(), outer.end(), program.finder().anchorName()), outer.end())
      << program.finder().anchorName();
  std::vector<Decision> later;
  for (int i = 0; i < 200; ++i) {
    for (const Decision& decision : program.run(recurrentIteration(lengths[i % 8]), 1)) {
      later.push_back(decision);
    }
  }
  EXPECT_TRUE(later.empty());  // followed for good
}

// As a libtorch program's ops show it: the time steps run forward, then their gradients backward,
// and neither loop holds most of the ops.
std::vector<std::string> recurrentIterationWithBackward(int time_steps) {
  std::vector<std::string> ops = {"aten::embedding"};
  for (int t = 0; t < time_steps; ++t) ops.insert(ops.end(), {"aten::addmm", "aten::tanh"});
  ops.insert(ops.end(),
             {"aten::nll_loss", "autograd::engine::evaluate_function: NllLossBackward0"});
  for (int t = 0; t < time_steps; ++t) {
    ops.insert(ops.end(), {"autograd::engine::evaluate_function: TanhBackward0",
                           "autograd::engine::evaluate_function: AddmmBackward0"});
  }
  ops.insert(ops.end(), {"aten::add_", "aten::zero_"});
  return ops;
}

TEST(OpLoopFinder, TimeStepsOfVaryingLengthForwardAndBackwardAreNotTheStep) {
  Program program;
  program.run(startUp(20), 1);
  const int lengths[] = {9, 12, 7, 14, 10, 11, 8, 13};
  for (int i = 0; i < 120; ++i) program.run(recurrentIterationWithBackward(lengths[i % 8]), 1);
  ASSERT_TRUE(program.following());
  ASSERT_EQ(program.finder().loops().size(), 1u);
  const std::vector<std::string> outer = {"aten::embedding", "aten::nll_loss",
                                          "autograd::engine::evaluate_function: NllLossBackward0",
                                          "aten::add_", "aten::zero_"};
  EXPECT_NE(std::find(outer.begin(), outer.end(), program.finder().anchorName()), outer.end())
      << program.finder().anchorName();
  std::vector<Decision> later;
  for (int i = 0; i < 100; ++i) {
    for (const Decision& decision :
         program.run(recurrentIterationWithBackward(lengths[i % 8]), 1)) {
      later.push_back(decision);
    }
  }
  EXPECT_TRUE(later.empty());
}

// A libtorch training iteration whose data loader reads each of the batch's samples, then
// normalises each, before the model runs forward and backward.
std::vector<std::string> iterationWithPerSampleLoops(int samples) {
  std::vector<std::string> ops;
  for (int i = 0; i < samples; ++i) ops.push_back("aten::select");
  for (int i = 0; i < samples; ++i) ops.insert(ops.end(), {"aten::sub", "aten::div"});
  ops.insert(ops.end(), {"aten::stack", "aten::conv2d", "aten::relu", "aten::linear",
                         "aten::nll_loss", "autograd::engine::evaluate_function: NllLossBackward0",
                         "autograd::engine::evaluate_function: AddmmBackward0",
                         "autograd::engine::evaluate_function: ConvolutionBackward0", "aten::add_",
                         "aten::zero_"});
  return ops;
}

TEST(OpLoopFinder, ADataLoadersLoopsOverTheSamplesOfABatchAreNotTheStep) {
  Program program;
  program.run(startUp(20), 1);
  program.run(iterationWithPerSampleLoops(64), 60);
  ASSERT_TRUE(program.following());
  const std::vector<OpLoopFinder::Loop>& loops = program.finder().loops();
  ASSERT_FALSE(loops.empty());
  EXPECT_FALSE(loops.back().inner);
  EXPECT_TRUE(loops.back().runs_backward);
  for (const OpLoopFinder::Loop& loop : loops) {
    EXPECT_TRUE(loop.inner || loop.runs_backward) << loop.name;
  }
  // Followed for good, from then on.
  EXPECT_TRUE(program.run(iterationWithPerSampleLoops(64), 40).empty());
}

TEST(OpLoopFinder, ALoopWithoutBackwardBetweenOtherLoopsWithoutBackwardIsStillAStep) {
  // Inference in two phases, one after the other and again: neither runs backward.
  Program program;
  for (int round = 0; round < 5; ++round) {
    program.run(kValidationIteration, 60);
    program.run({"aten::embedding", "aten::linear", "aten::softmax", "aten::topk"}, 60);
  }
  for (const OpLoopFinder::Loop& loop : program.finder().loops()) {
    EXPECT_FALSE(loop.inner) << loop.name;
  }
}

TEST(OpLoopFinder, ALogLineEveryFewIterationsLeavesTheLoopAsItIs) {
  Program program;
  std::vector<std::string> with_log_line = kTrainingIteration;
  with_log_line.insert(with_log_line.end(), {"aten::item", "aten::_local_scalar_dense"});
  program.run(kTrainingIteration, 60);
  ASSERT_TRUE(program.following());
  std::vector<Decision> decisions;
  for (int i = 0; i < 40; ++i) {
    for (const Decision& decision :
         program.run(i % 5 == 4 ? with_log_line : kTrainingIteration, 1)) {
      decisions.push_back(decision);
    }
  }
  EXPECT_TRUE(decisions.empty());
  EXPECT_FALSE(program.finder().loops()[0].inner);
}

}  // namespace
}  // namespace memseal::inject
