// Whole programs under the leak detector, not one loop: epochs of training then validation, with
// what a phase holds freed when it ends (a running total in train()'s locals, a reset every N
// steps, outputs gathered by a validation pass). Leaks that last only a phase are still leaks;
// what a phase gathers without autograd history is where its memory went, not a leak.
#include <torch/torch.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <deque>
#include <optional>
#include <vector>

#include "integration/detector_helpers.h"
#include "memseal/leak_detector.h"

namespace memseal {
namespace {

DetectorOptions programOptions(std::uint32_t warmup = 3) {
  DetectorOptions options;
  options.warmup = warmup;
  options.on_leak = ReportPolicy::kNone;
  return options;
}

struct Program {
  torch::nn::Sequential model{torch::nn::Linear(32, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 10)};
  torch::optim::SGD optimizer{model->parameters(), 0.01};
  LeakDetector* detector = nullptr;
  bool name_phases = true;
  // validate()'s first batches in a phase of their own ("start"), as when the loop of a pass is
  // found only after a few of its iterations.
  int validate_starts_apart = 0;

  torch::Tensor lossOf(const torch::Tensor& output) {
    return torch::nll_loss(torch::log_softmax(output, 1), torch::zeros({8}, torch::kLong));
  }

  // `reset_every` > 0: the total is reset every that many batches; `keep_total` false: the total
  // is a plain number (the fix).
  void train(int batches, bool keep_total, int reset_every = 0) {
    if (name_phases) detector->phase("train");
    torch::Tensor total = torch::zeros({});
    for (int batch = 1; batch <= batches; ++batch) {
      optimizer.zero_grad();
      torch::Tensor loss = lossOf(model->forward(torch::randn({8, 32})));
      loss.backward();
      optimizer.step();
      if (keep_total) {
        total = total + loss;  // the leak: every batch's graph stays behind the total
      } else {
        total = total + loss.item<float>();
      }
      if (reset_every > 0 && batch % reset_every == 0) total = torch::zeros({});
      detector->step();
    }
  }

  // `grad_on`: outputs keep their history; `gather`: outputs are kept until the pass ends.
  void validate(int batches, bool grad_on, bool gather) {
    if (name_phases) detector->phase(validate_starts_apart > 0 ? "start" : "validate");
    std::optional<torch::NoGradGuard> no_grad;
    if (!grad_on) no_grad.emplace();
    std::vector<torch::Tensor> outputs;
    for (int batch = 0; batch < batches; ++batch) {
      if (name_phases && batch > 0 && batch == validate_starts_apart) detector->phase("validate");
      torch::Tensor output = model->forward(torch::randn({8, 32}));
      if (gather) outputs.push_back(grad_on ? output : output.argmax(1));
      detector->step();
    }
  }
};

using test::findCategory;

TEST(Phases, TheTotalOfALossKeptInTrainsLocalsIsALeakThoughReturningFreesIt) {
  Program program;
  LeakDetector detector(programOptions());
  program.detector = &detector;
  for (int epoch = 0; epoch < 2; ++epoch) {
    program.train(40, /*keep_total=*/true);
    program.validate(15, false, false);
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  ASSERT_EQ(report.findings.size(), 1u) << report.toText();
  const LeakFinding& finding = report.findings.front();
  EXPECT_EQ(finding.category, LeakCategory::kAutogradGraphRetained) << report.toText();
  ASSERT_TRUE(finding.freed.has_value()) << report.toText();
  EXPECT_EQ(finding.freed->times, 2u) << report.toText();  // once per epoch
  EXPECT_EQ(finding.freed->phase, "train");
  EXPECT_GE(finding.freed->steps_per_time, 30.0);
  EXPECT_LE(finding.freed->steps_per_time, 41.0);
  EXPECT_FALSE(finding.freed->building_up);
  EXPECT_NE(report.toText().find("held"), std::string::npos) << report.toText();
  ASSERT_EQ(report.phases.size(), 2u);
  EXPECT_EQ(report.phases[0].name, "train");
  EXPECT_EQ(report.phases[0].runs, 2u);
  EXPECT_TRUE(report.phases[0].backward_ran);
  EXPECT_FALSE(report.phases[1].backward_ran);
}

TEST(Phases, ARunningTotalResetEveryFewStepsIsOneFindingWithItsPeriod) {
  Program program;
  program.name_phases = false;  // one loop: the resets alone cut it
  LeakDetector detector(programOptions());
  program.detector = &detector;
  program.train(130, /*keep_total=*/true, /*reset_every=*/20);
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  ASSERT_EQ(report.findings.size(), 1u) << report.toText();
  const LeakFinding& finding = report.findings.front();
  EXPECT_EQ(finding.category, LeakCategory::kAutogradGraphRetained);
  ASSERT_TRUE(finding.freed.has_value()) << report.toText();
  EXPECT_GE(finding.freed->times, 4u) << report.toText();
  EXPECT_NEAR(finding.freed->steps_per_time, 20.0, 3.0) << report.toText();
  EXPECT_TRUE(report.phases.empty());
}

TEST(Phases, TheFixedProgramIsNotFlagged) {
  Program program;
  LeakDetector detector(programOptions());
  program.detector = &detector;
  for (int epoch = 0; epoch < 2; ++epoch) {
    program.train(40, /*keep_total=*/false, /*reset_every=*/10);
    program.validate(15, false, false);
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
}

TEST(Phases, AValidationPassWithGradOnKeepingItsOutputsIsALeakOfThatPhase) {
  Program program;
  LeakDetector detector(programOptions());
  program.detector = &detector;
  for (int epoch = 0; epoch < 2; ++epoch) {
    program.train(40, /*keep_total=*/false);
    program.validate(15, /*grad_on=*/true, /*gather=*/true);
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  const LeakFinding* finding = findCategory(report, LeakCategory::kGradEnabledInference);
  ASSERT_NE(finding, nullptr) << report.toText();
  ASSERT_TRUE(finding->freed.has_value()) << report.toText();
  EXPECT_EQ(finding->freed->phase, "validate");
  EXPECT_GT(finding->freed->peak_bytes, 0);
}

TEST(Phases, PredictionsGatheredWithoutHistoryAreANoteNotALeak) {
  Program program;
  LeakDetector detector(programOptions());
  program.detector = &detector;
  for (int epoch = 0; epoch < 2; ++epoch) {
    program.train(40, /*keep_total=*/false);
    program.validate(20, /*grad_on=*/false, /*gather=*/true);
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_FALSE(report.freed_build_ups.empty()) << report.toText();
  bool noted = false;
  for (const std::string& note : report.noteLines()) {
    noted = noted || note.find("not a leak") != std::string::npos;
  }
  EXPECT_TRUE(noted) << report.toText();
}

// A pass of 8 steps is noted, and one of 7 is not (RetentionHistory::kMinBuildUpSteps), wherever
// the verdict's renewals fall. While memory moves they come one boundary in 8, and at other times
// as their cost allows (so where they fall depends on the clock): a build-up seen by none of them
// while it grew was dropped unnoted. The pass starts at each offset from the training loop's
// renewals, and, as `memseal run` names phases after the loops it finds, its first steps may
// belong to another phase than the rest.
TEST(Phases, PredictionsGatheredOverAShortPassAreNotedWhereverTheRenewalsFall) {
  for (int pass : {7, 8}) {
    for (int first_steps_apart = 0; first_steps_apart < 7; ++first_steps_apart) {
      for (int offset = 0; offset < 8; ++offset) {
        Program program;
        program.validate_starts_apart = first_steps_apart;
        LeakDetector detector(programOptions());
        program.detector = &detector;
        program.train(40 + offset, /*keep_total=*/false);
        program.validate(pass, /*grad_on=*/false, /*gather=*/true);
        program.train(40, /*keep_total=*/false);
        LeakReport report = detector.finish();
        std::string where = "pass " + std::to_string(pass) + ", first steps apart " +
                            std::to_string(first_steps_apart) + ", offset " +
                            std::to_string(offset) + "\n";
        EXPECT_FALSE(report.leak) << where << report.toText();
        EXPECT_EQ(report.freed_build_ups.size(), pass >= 8 ? 1u : 0u) << where << report.toText();
      }
    }
  }
}

TEST(Phases, ABoundedCacheThatEvictsIsNeitherALeakNorANote) {
  LeakDetector detector(programOptions());
  std::deque<torch::Tensor> recent;
  for (int step = 0; step < 80; ++step) {
    recent.push_back(torch::randn({64}));
    if (recent.size() > 12) recent.pop_front();
    detector.step();
  }
  recent.clear();
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_TRUE(report.freed_build_ups.empty()) << report.toText();
  for (const std::string& note : report.noteLines()) {
    EXPECT_EQ(note.find("not a leak"), std::string::npos) << report.toText();
  }
}

TEST(Phases, ALeakInAShortPhaseIsFoundAgainstThatPhasesSteps) {
  // The validation pass is a tenth of the steps; what it keeps is never freed.
  Program program;
  LeakDetector detector(programOptions());
  program.detector = &detector;
  std::vector<torch::Tensor> kept;
  for (int epoch = 0; epoch < 3; ++epoch) {
    program.train(60, /*keep_total=*/false);
    detector.phase("validate");
    torch::NoGradGuard no_grad;
    for (int batch = 0; batch < 8; ++batch) {
      kept.push_back(program.model->forward(torch::randn({8, 32})));
      detector.step();
    }
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  const LeakFinding& finding = report.findings.front();
  EXPECT_EQ(finding.category, LeakCategory::kTensorsRetained) << report.toText();
  EXPECT_FALSE(finding.freed.has_value());
  EXPECT_EQ(finding.steps_observed, 24u) << report.toText();  // the validation steps only
}

TEST(Phases, PhasesAndWhatWasFreedSurviveTheJsonReport) {
  Program program;
  LeakDetector detector(programOptions());
  program.detector = &detector;
  for (int epoch = 0; epoch < 2; ++epoch) {
    program.train(40, /*keep_total=*/true);
    program.validate(10, false, false);
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak);
  LeakReport read = LeakReport::fromJson(report.toJson());
  ASSERT_EQ(read.phases.size(), report.phases.size());
  EXPECT_EQ(read.phases[1].name, "validate");
  ASSERT_TRUE(read.findings.front().freed.has_value());
  EXPECT_EQ(read.findings.front().freed->times, report.findings.front().freed->times);
  EXPECT_EQ(read.findings.front().freed->peak_bytes, report.findings.front().freed->peak_bytes);
  EXPECT_EQ(read.per_step.back().phase, report.per_step.back().phase);
  EXPECT_EQ(read.toText(), report.toText());
  nlohmann::json json = nlohmann::json::parse(report.toJson());
  EXPECT_TRUE(json["findings"][0]["freed"].is_object());
  // A phase index out of range is refused.
  json["per_step"][0]["phase"] = 9;
  EXPECT_THROW(LeakReport::fromJson(json.dump()), std::invalid_argument);
}

// A loop that keeps every step's output (tensors without history), `steps` steps long.
void keepEveryStep(LeakDetector& detector, std::vector<torch::Tensor>& kept, std::uint32_t steps) {
  for (std::uint32_t step = 0; step < steps; ++step) {
    kept.push_back(torch::ones({256}) * 2);
    detector.step();
  }
}

// Steps that go on as the program ends, as time windows do: each allocates a little and frees it.
void stepsAsTheProgramEnds(LeakDetector& detector) {
  for (int window = 0; window < 5; ++window) {
    torch::Tensor scratch = torch::ones({4});
    detector.step();
  }
}

// Steps that go on after the loop (time windows through a program's teardown): the end frees what
// the loop kept, and a report made afterwards sees it held for a while, then freed. Told when the
// loop ended, the detector judges as of then: a leak, as a report taken at that step said.
TEST(Phases, WhatTheProgramsEndFreedIsALeakWhenTheReportKnowsWhenItsLoopEnded) {
  constexpr std::uint32_t kLoopSteps = 60;
  LeakDetector detector(programOptions());
  std::vector<torch::Tensor> kept;
  keepEveryStep(detector, kept, kLoopSteps);
  kept.clear();  // main's locals go as it returns
  stepsAsTheProgramEnds(detector);
  LeakReport afterwards = detector.report();
  EXPECT_FALSE(afterwards.leak) << afterwards.toText();
  ASSERT_EQ(afterwards.freed_build_ups.size(), 1u) << afterwards.toText();
  // The last step of the loop is the one whose sample the fall began from.
  LeakReport as_of_the_loop = detector.report(kLoopSteps - 1);
  ASSERT_TRUE(as_of_the_loop.leak) << as_of_the_loop.toText();
  ASSERT_EQ(as_of_the_loop.findings.size(), 1u) << as_of_the_loop.toText();
  EXPECT_EQ(as_of_the_loop.findings[0].category, LeakCategory::kTensorsRetained);
  EXPECT_FALSE(as_of_the_loop.findings[0].freed.has_value());
  EXPECT_TRUE(as_of_the_loop.freed_build_ups.empty()) << as_of_the_loop.toText();
  ASSERT_TRUE(as_of_the_loop.detected_at_step.has_value());
  EXPECT_LT(*as_of_the_loop.detected_at_step, kLoopSteps);
  // Told of an end after the free, nothing the program freed was freed by its end.
  EXPECT_FALSE(detector.report(kLoopSteps + 3).leak);
}

// Time windows end on memseal's own thread, so a step boundary can come while the program frees
// the list of what it kept (Python's list.clear() frees from its end): half of the build-up is
// gone at that boundary, the rest at the next. It was freed together, not given back.
TEST(Phases, AListFreedAcrossAStepBoundaryIsStillFreedTogether) {
  constexpr std::uint32_t kLoopSteps = 60;
  LeakDetector detector(programOptions());
  std::vector<torch::Tensor> kept;
  keepEveryStep(detector, kept, kLoopSteps);
  kept.resize(kept.size() / 2);
  detector.step();
  kept.clear();
  stepsAsTheProgramEnds(detector);
  LeakReport afterwards = detector.report();
  ASSERT_EQ(afterwards.freed_build_ups.size(), 1u) << afterwards.toText();
  EXPECT_EQ(afterwards.freed_build_ups[0].freed->last_step, kLoopSteps - 1);
  LeakReport as_of_the_loop = detector.report(kLoopSteps - 1);
  ASSERT_TRUE(as_of_the_loop.leak) << as_of_the_loop.toText();
  EXPECT_EQ(as_of_the_loop.findings[0].category, LeakCategory::kTensorsRetained);
}

// What a phase run before gathered and freed was a phase's, also when its last run is freed by
// the program's end; and so is a running total reset before: neither becomes a leak at the end.
TEST(Phases, APhaseThatRanBeforeOrWasResetStaysAPhasesAtTheProgramsEnd) {
  {
    Program program;
    LeakDetector detector(programOptions());
    program.detector = &detector;
    for (int epoch = 0; epoch < 2; ++epoch) {
      program.train(40, /*keep_total=*/false);
      program.validate(20, /*grad_on=*/false, /*gather=*/true);
    }
    // The last pass's outputs went as it returned; steps go on as the program ends.
    std::uint32_t loop_ended_at = detector.report().steps - 1;
    stepsAsTheProgramEnds(detector);
    LeakReport gathered = detector.report(loop_ended_at);
    EXPECT_FALSE(gathered.leak) << gathered.toText();
    EXPECT_FALSE(gathered.freed_build_ups.empty()) << gathered.toText();
  }
  Program resets;
  resets.name_phases = false;
  LeakDetector reset_detector(programOptions());
  resets.detector = &reset_detector;
  resets.train(130, /*keep_total=*/true, /*reset_every=*/20);
  LeakReport total = reset_detector.report(110);
  ASSERT_TRUE(total.leak) << total.toText();
  ASSERT_EQ(total.findings.size(), 1u) << total.toText();
  ASSERT_TRUE(total.findings[0].freed.has_value()) << total.toText();
  EXPECT_GE(total.findings[0].freed->times, 4u) << total.toText();
}

}  // namespace
}  // namespace memseal
