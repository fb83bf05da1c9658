// Phases of steps on their own: runs, positions of steps among a phase's steps, backward per phase.
#include "detect/step_phases.h"

#include <gtest/gtest.h>

#include <vector>

namespace memseal::detect {
namespace {

// Epochs of 10 training steps then 4 validation steps, from step 0.
StepPhases epochs(int count) {
  StepPhases phases;
  std::uint32_t step = 0;
  for (int epoch = 0; epoch < count; ++epoch) {
    phases.begin(step, "train");
    step += 10;
    phases.begin(step, "validate");
    step += 4;
  }
  return phases;
}

TEST(StepPhases, WithoutNamesEveryStepIsOnePhase) {
  StepPhases phases;
  EXPECT_FALSE(phases.several());
  EXPECT_EQ(phases.phaseOf(1000), 0u);
  EXPECT_EQ(phases.stepsIn(phases.phasesOf({3}), 5, 24), 20u);
  std::vector<std::uint32_t> positions = phases.positionsOf({5, 7, 24}, ~PhaseSet{0}, 5, 24);
  EXPECT_EQ(positions, (std::vector<std::uint32_t>{0, 2, 19}));
}

TEST(StepPhases, NamingThePhaseBeforeTheFirstStepLeavesOnePhase) {
  StepPhases phases;
  phases.begin(0, "train");
  EXPECT_FALSE(phases.several());
  EXPECT_EQ(phases.name(phases.phaseOf(3)), "train");
}

TEST(StepPhases, APhaseBegunAgainKeepsItsNumber) {
  StepPhases phases = epochs(3);
  EXPECT_TRUE(phases.several());
  EXPECT_EQ(phases.phaseOf(0), phases.phaseOf(14));   // train, epochs 1 and 2
  EXPECT_EQ(phases.phaseOf(10), phases.phaseOf(27));  // validate, epochs 1 and 2
  EXPECT_NE(phases.phaseOf(9), phases.phaseOf(10));
}

TEST(StepPhases, StepsAreCountedAndPlacedAmongTheirPhaseOnly) {
  StepPhases phases = epochs(3);  // validate: 10-13, 24-27, 38-41
  PhaseSet validate = phaseBit(phases.phaseOf(10));
  EXPECT_EQ(phases.stepsIn(validate, 0, 41), 12u);
  EXPECT_EQ(phases.stepsIn(validate, 12, 25), 4u);  // 12, 13, 24, 25
  std::vector<std::uint32_t> positions = phases.positionsOf({10, 13, 24, 41}, validate, 0, 41);
  EXPECT_EQ(positions, (std::vector<std::uint32_t>{0, 3, 4, 11}));
  // A step of another phase is left out.
  EXPECT_EQ(phases.positionsOf({5, 24}, validate, 0, 41), (std::vector<std::uint32_t>{4}));
  // Both phases: every step.
  PhaseSet both = validate | phaseBit(phases.phaseOf(0));
  EXPECT_EQ(phases.stepsIn(both, 3, 41), 39u);
  EXPECT_EQ(phases.positionsOf({3, 41}, both, 3, 41), (std::vector<std::uint32_t>{0, 38}));
}

TEST(StepPhases, BackwardIsKnownPerPhase) {
  StepPhases phases = epochs(2);
  phases.markBackward(3);
  EXPECT_TRUE(phases.backwardRan(phaseBit(phases.phaseOf(0))));
  EXPECT_FALSE(phases.backwardRan(phaseBit(phases.phaseOf(10))));
}

TEST(StepPhases, SummariesCountStepsAndRunsBeforeTheStepNowRunning) {
  StepPhases phases = epochs(2);
  std::vector<StepPhases::Summary> summaries = phases.summaries(26);
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].name, "train");
  EXPECT_EQ(summaries[0].steps, 20u);
  EXPECT_EQ(summaries[0].runs, 2u);
  EXPECT_EQ(summaries[1].name, "validate");
  EXPECT_EQ(summaries[1].steps, 6u);  // 10-13, 24-25
  EXPECT_EQ(summaries[1].first_step, 10u);
}

TEST(StepPhases, APhaseWithoutStepsGivesWayToTheNext) {
  StepPhases phases;
  phases.begin(5, "a");
  phases.begin(5, "b");  // "a" never had a step
  phases.begin(9, "c");
  std::vector<StepPhases::Summary> summaries = phases.summaries(12);
  ASSERT_EQ(summaries.size(), 3u);
  EXPECT_EQ(summaries[0].name, "");
  EXPECT_EQ(summaries[1].name, "b");
  EXPECT_EQ(summaries[1].steps, 4u);
  EXPECT_EQ(summaries[2].name, "c");
}

TEST(StepPhases, StepsAlreadyTakenCanBeMovedToTheNextPhase) {
  // A loop is seen to have ended three steps after the next phase began.
  StepPhases phases;
  phases.begin(0, "train");
  phases.markBackward(5);
  phases.markBackward(9);
  phases.begin(12 - 3, "validate");
  EXPECT_EQ(phases.name(phases.phaseOf(8)), "train");
  EXPECT_EQ(phases.name(phases.phaseOf(9)), "validate");
  // Backward is known by step, so the steps moved take theirs along.
  EXPECT_TRUE(phases.backwardRan(phaseBit(phases.phaseOf(9))));
  EXPECT_FALSE(phases.backwardRanInMostOf({9, 10, 11}));
  EXPECT_TRUE(phases.backwardRanInMostOf({5, 6, 9}));
  // Moving back over a whole run takes it away.
  phases.begin(15, "train");
  phases.begin(15 - 6, "test");
  std::vector<StepPhases::Summary> summaries = phases.summaries(20);
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].name, "train");
  EXPECT_EQ(summaries[0].steps, 9u);
  EXPECT_EQ(summaries[1].name, "test");
  EXPECT_EQ(summaries[1].steps, 11u);
  EXPECT_TRUE(phases.inFirstRunOfItsPhase(19));
}

TEST(StepPhases, BackwardSeenOneStepInManyCoversItsRunOnly) {
  StepPhases phases;
  phases.begin(0, "train");
  phases.markBackward(0);
  phases.markBackward(32);  // ops watched one step in 32 in between
  phases.begin(40, "validate");
  phases.begin(60, "train");
  phases.markBackward(64);
  EXPECT_TRUE(phases.backwardRanInMostOf({10, 20, 30}));
  EXPECT_FALSE(phases.backwardRanInMostOf({40, 50, 59}));
}

}  // namespace
}  // namespace memseal::detect
