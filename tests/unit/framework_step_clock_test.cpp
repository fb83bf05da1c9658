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
  // at once; each step ends at the batch after an optimizer step, so what the iteration does
  // after its step (`total_loss += loss`) is in the step of its forward pass.
  EXPECT_EQ(decisions(clock, events), "..FS..S..S..S..");
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
  EXPECT_EQ(made.substr(0, 4), "FS.S");
  EXPECT_EQ(made.find('P', 1), std::string::npos) << made;
}

TEST(FrameworkStepClock, AGansIterationBeginsAtItsBatchNotAtTheGeneratorsUpdate) {
  // PyTorch's DCGAN example: the discriminator's optimizer steps first; the generator's update,
  // which calls the discriminator again, comes after it; then `errD_sum += errD`.
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int i = 0; i < 8; ++i) {
    events.push_back(loader(1));
    events.push_back(module(10, "Discriminator"));
    events.push_back(module(11, "Generator"));
    events.push_back(module(10, "Discriminator"));
    events.push_back(optimizer(2, "Adam"));  // the discriminator's
    events.push_back(module(10, "Discriminator"));
    events.push_back(optimizer(3, "Adam"));  // the generator's
  }
  std::string made = decisions(clock, events);
  // Until the batch is known to come once per step, the first signal after the step ends it;
  // from then on, the batch.
  EXPECT_EQ(made.substr(0, 7), "....FS.");
  EXPECT_EQ(made.substr(35, 14), "S......S......") << made;
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
  EXPECT_EQ(made.substr(0, 4), ".FS.");
  // Evaluation's first batch ends training's last step; evaluation takes the clock at its third
  // batch (one batch per training step before: 2x1+1).
  EXPECT_EQ(made.substr(20, 10), "S.PSSSSSSS");
  // Training again at its loader's first batch, which only ever came with the optimizer's steps:
  // the iteration it begins is training's.
  EXPECT_EQ(made.substr(30, 4), "P.S.");
  EXPECT_EQ(clock.currentUse(), std::optional<std::size_t>(1));  // and evaluation last
  std::vector<std::string> phases;
  for (const auto& use : clock.uses()) phases.push_back(use.phase);
  EXPECT_EQ(phases,
            (std::vector<std::string>{"optimizer steps (SGD)", "batches (DataLoader over Val)"}));
}

TEST(FrameworkStepClock, TrainingAfterAnEvaluationPassBeginsAtTheModelsFirstTrainingCall) {
  // pytorch/examples' word_language_model: no loaders; the model in training mode, then in eval
  // mode (another object: module calls in eval mode are told apart).
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 10; ++i) {
      events.push_back(module(10, "Net"));
      events.push_back(optimizer(2));
    }
    for (int i = 0; i < 10; ++i) events.push_back(module(11, "Net in eval mode"));
  }
  std::string made = decisions(clock, events);
  EXPECT_EQ(made.substr(20, 4), "S.PS");
  // The first evaluation calls came after training's last step: the step they end is evaluation's.
  FrameworkStepClock again;
  for (std::size_t i = 0; i < 24; ++i) {
    ClockDecision decision = again.onEvent(events[i]);
    EXPECT_EQ(decision.ended_step_is_new_phase, i == 22) << i;
  }
  // The training-mode call ends the evaluation pass's last step; its backward is training's.
  EXPECT_EQ(made.substr(30, 4), "P.S.");
  EXPECT_EQ(clock.uses().size(), 2u);
}

TEST(FrameworkStepClock, AModelEvaluatedInTrainingModeBringsNoPhaseBack) {
  // An evaluation loader's batches, with the model called in training mode (no model.eval()):
  // the model's calls came under both clocks and say nothing of which phase runs.
  FrameworkStepClock clock;
  std::vector<StepEvent> events;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 10; ++i) {
      events.push_back(loader(1, "DataLoader over Train"));
      events.push_back(module(10));
      events.push_back(optimizer(2));
    }
    for (int i = 0; i < 10; ++i) {
      events.push_back(loader(3, "DataLoader over Val"));
      events.push_back(module(10));
    }
  }
  std::string made = decisions(clock, events);
  // Evaluation's clock at its third batch; training's back at its loader's first batch; and in
  // the second evaluation pass, the model's calls bring no training back.
  EXPECT_EQ(made.substr(30, 6), "S...PS");
  EXPECT_EQ(made.substr(50, 4), "P..S");
  EXPECT_EQ(made.substr(80, 6), "S...PS") << made;
  EXPECT_EQ(std::count(made.begin(), made.end(), 'P'), 3) << made;
}

TEST(FrameworkStepClock, InferenceStepsAreTheOutermostModulesCalls) {
  FrameworkStepClock clock;
  EXPECT_FALSE(clock.currentUse().has_value());
  std::string made = decisions(clock, {module(5), module(5), module(5), module(5), module(5)});
  EXPECT_EQ(made, "..FSS");
  EXPECT_EQ(clock.uses()[0].signal, StepSignal::kModuleCall);
  EXPECT_EQ(clock.uses()[0].object_name, "Net");
}

TEST(FrameworkStepClock, TwoObjectsOfOneNameAreTwoPhases) {
  FrameworkStepClock clock;
  EXPECT_EQ(decisions(clock, {loader(1), loader(1), loader(1), loader(1), loader(2), loader(2),
                              loader(2)}),
            "..FSS.P");
  ASSERT_EQ(clock.uses().size(), 2u);
  EXPECT_EQ(clock.uses()[0].phase, "batches (DataLoader over TensorDataset)");
  EXPECT_EQ(clock.uses()[1].phase, "batches (DataLoader over TensorDataset) 2");
}

}  // namespace
}  // namespace memseal::inject
