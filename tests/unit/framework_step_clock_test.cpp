// Which of a Python program's own signals ends its steps (inject/framework_step_clock.h).
#include "inject/framework_step_clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace memseal::inject {
namespace {

StepEvent optimizer(std::uint64_t id, std::string name = "SGD") {
  return {StepSignal::kOptimizerStep, id, std::move(name)};
}
StepEvent loader(std::uint64_t id, std::string name = "DataLoader over TensorDataset") {
  return {StepSignal::kLoaderBatch, id, std::move(name)};
}
StepEvent module(std::uint64_t id, std::string name = "Net") {
  return {StepSignal::kModuleCall, id, std::move(name)};
}

// The events' decisions: 'S' a step, 'P' a step and a new phase, 'F' the first phase (no step),
// '.' nothing.
std::string decisions(FrameworkStepClock& clock, const std::vector<StepEvent>& events) {
  std::string out;
  for (const StepEvent& event : events) {
    ClockDecision decision = clock.onEvent(event);
    if (!decision.new_phase.empty()) {
      out += decision.end_step ? 'P' : 'F';
    } else {
      out += decision.end_step ? 'S' : '.';
    }
  }
  return out;
}

TEST(FrameworkStepClock, TrainingStepsAreTheOptimizersStepsNotItsBatchesOrModuleCalls) {
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int i = 0; i < 5; ++i) {
    events.push_back(loader(1));
    events.push_back(module(7));
    events.push_back(optimizer(3));
  }
  // The first batch and module call come before the first optimizer step, which takes the clock
  // at once and ends every step from then on.
  EXPECT_EQ(decisions(clock, events), "..F..S..S..S..S");
  ASSERT_EQ(clock.uses().size(), 1u);
  EXPECT_EQ(clock.uses()[0].phase, "optimizer steps (SGD)");
  EXPECT_EQ(clock.uses()[0].steps, 4u);
}

TEST(FrameworkStepClock, ASecondOptimizerOfTheSameIterationNeverTakesTheClock) {
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int i = 0; i < 50; ++i) {
    events.push_back(optimizer(1, "Adam"));  // the discriminator's
    events.push_back(optimizer(2, "Adam"));  // the generator's
  }
  std::string made = decisions(clock, events);
  EXPECT_EQ(made.substr(0, 4), "F.S.");
  EXPECT_EQ(made.find('P', 1), std::string::npos) << made;
}

TEST(FrameworkStepClock, AccumulatedBatchesStayInsideTheOptimizersStep) {
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int i = 0; i < 40; ++i) {
    for (int micro = 0; micro < 6; ++micro) events.push_back(loader(1));
    events.push_back(optimizer(2));
  }
  std::string made = decisions(clock, events);
  // The loader takes the clock at its third batch, ends steps until the optimizer outranks it;
  // six batches per step never take it back.
  EXPECT_EQ(made.substr(0, 7), "..FSSSP");
  EXPECT_EQ(made.find('P', 7), std::string::npos) << made;
  EXPECT_EQ(std::count(made.begin(), made.end(), 'S'), 3 + 39);
}

TEST(FrameworkStepClock,
     AnEvaluationLoaderAfterTrainingIsAPhaseOfItsOwnAndTrainingResumesItsPhase) {
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 10; ++i) {
      events.push_back(loader(1, "DataLoader over Train"));
      events.push_back(optimizer(2));
    }
    for (int i = 0; i < 10; ++i) events.push_back(loader(3, "DataLoader over Val"));
  }
  std::string made = decisions(clock, events);
  EXPECT_EQ(made.substr(0, 4), ".F.S");
  // Evaluation takes the clock at its third batch (one batch per training step before: 2x1+1).
  EXPECT_EQ(made.substr(20, 10), "..PSSSSSSS");
  EXPECT_EQ(made[31], 'P');  // training again: the optimizer at once
  EXPECT_EQ(clock.currentUse(), std::optional<std::size_t>(1));  // and evaluation last
  std::vector<std::string> phases;
  for (const auto& use : clock.uses()) phases.push_back(use.phase);
  EXPECT_EQ(phases,
            (std::vector<std::string>{"optimizer steps (SGD)", "batches (DataLoader over Val)"}));
}

TEST(FrameworkStepClock, InferenceStepsAreTheOutermostModulesCalls) {
  FrameworkStepClock clock;
  EXPECT_FALSE(clock.currentUse().has_value());
  std::string made = decisions(clock, {module(5), module(5), module(5), module(5), module(5)});
  EXPECT_EQ(made, "..FSS");
  EXPECT_EQ(clock.uses()[0].step_is, "one step per call of Net (the outermost module)");
}

TEST(FrameworkStepClock, TwoObjectsOfOneNameAreTwoPhases) {
  FrameworkStepClock clock;
  EXPECT_EQ(decisions(clock, {loader(1), loader(1), loader(1), loader(1), loader(2), loader(2),
                              loader(2)}),
            "..FS..P");
  ASSERT_EQ(clock.uses().size(), 2u);
  EXPECT_EQ(clock.uses()[0].phase, "batches (DataLoader over TensorDataset)");
  EXPECT_EQ(clock.uses()[1].phase, "batches (DataLoader over TensorDataset) 2");
}

}  // namespace
}  // namespace memseal::inject
