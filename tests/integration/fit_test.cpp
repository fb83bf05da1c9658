// Capacity that holds when the step's peak moves: phase models checked against arithmetic,
// training steps whose peak changes phase inside the measured range checked against the largest
// size that truly fits (found by measuring), attention over sequence lengths, and verification
// that searches when the prediction misses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>

#include "memseal/fit.h"

namespace {

using SizedStep = std::function<void(std::int64_t, int)>;

memseal::FitPoint point(std::int64_t size, std::vector<memseal::PhasePeak> phases) {
  std::int64_t peak = 0;
  for (const memseal::PhasePeak& phase : phases) peak = std::max(peak, phase.peak_bytes);
  return {size, peak, std::move(phases)};
}

// ---- arithmetic ----

TEST(FitPhases, ConstantThenLinearPredictsWhereTheLinePassesTheBudget) {
  // update: 1,000,500 flat; backward: 100,000 + 1,000 s. At 1..8 the flat phase holds the peak,
  // and a line through the step's peaks would be flat.
  auto at = [](std::int64_t s) {
    return point(
        s,
        {{"forward", 50'000 + 500 * s}, {"backward", 100'000 + 1'000 * s}, {"update", 1'000'500}});
  };
  memseal::FitOptions options;
  options.budget_bytes = 10'000'500;  // no size lands on it exactly
  options.margin = 0;
  memseal::FitReport report = memseal::fitPeaks({at(1), at(2), at(4), at(8)}, options);
  ASSERT_EQ(report.model, "phases") << report.toText();
  // 100,000 + 1,000 s <= 10,000,500  ->  s = 9900
  ASSERT_TRUE(report.predicted_max_size.has_value()) << report.toText();
  EXPECT_EQ(*report.predicted_max_size, 9900);
  EXPECT_EQ(report.limiting_phase, "backward");
  // The update holds the peak until backward passes 1,000,500 (at 901: 1,001,000).
  ASSERT_EQ(report.phase_changes.size(), 2u) << report.toText();
  EXPECT_EQ(report.phase_changes[0].phase, "update");
  EXPECT_EQ(report.phase_changes[1].phase, "backward");
  EXPECT_EQ(report.phase_changes[1].size, 901);
  EXPECT_NE(report.toText().find("then in backward from size 901"), std::string::npos);
}

TEST(FitPhases, TwoCrossingLinesInsideTheRangeAreFollowedPastIt) {
  // backward: 2,000,000 + 100 s (a weight's gradient); forward: 10,000 s (activations): they cross
  // at s = 201, inside the measured 50..400. The step's own peaks bend there: no line, no
  // parabola; the phases are lines.
  auto at = [](std::int64_t s) {
    return point(s, {{"forward", 10'000 * s}, {"backward", 2'000'000 + 100 * s}});
  };
  memseal::FitOptions options;
  options.budget_bytes = 100'005'000;
  options.margin = 0.1;
  memseal::FitReport report =
      memseal::fitPeaks({at(50), at(100), at(200), at(300), at(400)}, options);
  EXPECT_FALSE(report.is_linear);
  ASSERT_EQ(report.model, "phases") << report.toText();
  // 10,000 s <= 90,004,500  ->  s = 9000
  EXPECT_EQ(report.predicted_max_size, 9000);
  EXPECT_EQ(report.limiting_phase, "forward");
  // The step's own model would have been refused; fitting the step alone says so.
  memseal::FitReport step_only = memseal::fitPeaks({{50, at(50).peak_bytes},
                                                    {100, at(100).peak_bytes},
                                                    {200, at(200).peak_bytes},
                                                    {300, at(300).peak_bytes},
                                                    {400, at(400).peak_bytes}},
                                                   options);
  EXPECT_EQ(step_only.model, "none");
  EXPECT_FALSE(step_only.predicted_max_size.has_value());
}

TEST(FitPhases, AQuadraticPhaseIsFittedAsQuadratic) {
  // forward: attention scores, 4 s^2 + 1,000 s; update: 500,000 flat.
  auto at = [](std::int64_t s) {
    return point(s, {{"forward", 4 * s * s + 1'000 * s}, {"update", 500'000}});
  };
  memseal::FitOptions options;
  options.budget_bytes = 400'000'000;
  options.margin = 0;
  memseal::FitReport report =
      memseal::fitPeaks({at(64), at(128), at(192), at(256), at(384)}, options);
  ASSERT_EQ(report.model, "phases") << report.toText();
  EXPECT_EQ(report.phases.front().model, "quadratic");
  EXPECT_EQ(report.phases.back().model, "linear");
  // 4 s^2 + 1,000 s <= 400,000,000  ->  s = 9875 (399,937,500; 9876 gives 400,017,504)
  ASSERT_TRUE(report.predicted_max_size.has_value());
  EXPECT_EQ(*report.predicted_max_size, 9875);
}

TEST(FitPhases, PointsWhosePhasesDifferFallBackToTheStep) {
  memseal::FitOptions options;
  options.budget_bytes = 1'000'000;
  memseal::FitReport report = memseal::fitPeaks(
      {point(1, {{"forward", 1'100}}), point(2, {{"forward", 1'200}, {"update", 10}}),
       point(4, {{"forward", 1'400}})},
      options);
  EXPECT_EQ(report.model, "linear");
  EXPECT_TRUE(report.phases.empty());
}

// ---- measured ----

// The peak of one size as fit measures it (a warm-up step, then the measured one), with a new
// step whose model is made under fit's tracker, as in the fit it checks.
std::int64_t measuredPeak(const std::function<SizedStep()>& make_step, std::int64_t size) {
  memseal::FitOptions options;
  options.sizes = {size, size + 1, size + 2};
  options.budget_bytes = std::int64_t{1} << 40;
  return memseal::fitCapacity(make_step(), options).points.front().peak_bytes;
}

// The largest size whose measured peak is within `usable`, by bisection between a size that fits
// and one that does not.
std::int64_t largestFittingByMeasurement(const std::function<SizedStep()>& make_step,
                                         std::int64_t fits, std::int64_t fails, double usable) {
  while (fails - fits > 1) {
    std::int64_t middle = fits + (fails - fits) / 2;
    if (static_cast<double>(measuredPeak(make_step, middle)) <= usable) {
      fits = middle;
    } else {
      fails = middle;
    }
  }
  return fits;
}

// An MLP with Adam: at small batches the peak is in the optimizer's update (parameter-sized
// temporaries), at larger ones in forward and backward (activations). Its parameters are made
// inside the first step, so that every byte is tracked.
struct AdamMlp {
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer;

  void operator()(std::int64_t batch, int) {
    if (!model) {
      torch::manual_seed(0);
      model = torch::nn::Sequential(torch::nn::Linear(256, 512), torch::nn::ReLU(),
                                    torch::nn::Linear(512, 512), torch::nn::ReLU(),
                                    torch::nn::Linear(512, 10));
      optimizer = std::make_unique<torch::optim::Adam>(model->parameters());
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(torch::randn({batch, 256})), torch::randint(0, 10, {batch}));
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
  }
};

TEST(FitCapacity, AdamTrainingWhosePeakChangesPhaseInsideTheRangeIsPredictedWithin5Percent) {
  auto make_step = [] {
    auto mlp = std::make_shared<AdamMlp>();
    return SizedStep([mlp](std::int64_t batch, int i) { (*mlp)(batch, i); });
  };
  memseal::FitOptions options;
  options.sizes = {16, 64, 256, 512, 1024};
  options.budget_bytes = std::int64_t{48} << 20;
  memseal::FitReport report = memseal::fitCapacity(make_step(), options);
  ASSERT_EQ(report.model, "phases") << report.toText();
  ASSERT_GE(report.phase_changes.size(), 2u) << report.toText();
  EXPECT_EQ(report.phase_changes.front().phase, "update") << report.toText();
  ASSERT_TRUE(report.predicted_max_size.has_value()) << report.toText();
  double usable = static_cast<double>(*options.budget_bytes) * (1 - report.margin);
  std::int64_t predicted = *report.predicted_max_size;
  std::int64_t truth =
      largestFittingByMeasurement(make_step, options.sizes.back(), predicted * 2, usable);
  EXPECT_LE(std::abs(static_cast<double>(predicted - truth)) / static_cast<double>(truth), 0.05)
      << "predicted " << predicted << ", measured " << truth << "\n"
      << report.toText();
}

// One attention block trained over sequence lengths: the scores are length x length.
void attentionStep(torch::nn::Linear& project, std::int64_t length) {
  torch::Tensor x = torch::randn({length, 64});
  torch::Tensor qkv = project->forward(x);
  auto parts = qkv.chunk(3, -1);
  torch::Tensor scores = torch::softmax(parts[0].matmul(parts[1].t()) / 8.0, -1);
  scores.matmul(parts[2]).pow(2).mean().backward();
}

TEST(FitCapacity, AttentionTrainedOverSequenceLengthIsQuadraticAndPredictedRight) {
  torch::manual_seed(0);
  torch::nn::Linear project(64, 192);
  SizedStep step = [&](std::int64_t length, int) {
    project->zero_grad();
    attentionStep(project, length);
  };
  memseal::FitOptions options;
  options.sizes = {64, 128, 192, 256, 320};
  options.budget_bytes = std::int64_t{64} << 20;
  options.verify = true;
  memseal::FitReport report = memseal::fitCapacity(step, options);
  ASSERT_TRUE(report.predicted_max_size.has_value()) << report.toText();
  EXPECT_FALSE(report.is_linear);
  bool quadratic = report.model == "quadratic";
  for (const memseal::PhaseModel& phase : report.phases) quadratic |= phase.model == "quadratic";
  EXPECT_TRUE(quadratic) << report.toText();
  ASSERT_TRUE(report.verification.has_value());
  EXPECT_LT(std::abs(report.verification->relative_error), 0.05) << report.toText();
  EXPECT_TRUE(report.verification->within_budget) << report.toText();
}

// Sizes 32..128 of 4 KiB per unit, an 8 MiB budget, the prediction verified.
memseal::FitReport verifiedFit(const SizedStep& step) {
  memseal::FitOptions options;
  options.sizes = {32, 64, 96, 128};
  options.budget_bytes = std::int64_t{8} << 20;
  options.verify = true;
  return memseal::fitCapacity(step, options);
}

TEST(FitCapacity, AMissedPredictionIsSearchedAndTheMeasuredSizeReported) {
  // 4 KiB per unit, and past 300 a workspace of 8 MiB that no measured size shows.
  SizedStep step = [](std::int64_t size, int) {
    torch::Tensor activations = torch::empty({size * 1024});
    torch::Tensor workspace = size > 300 ? torch::empty({2 << 20}) : torch::Tensor();
    (void)activations.sum();
  };
  memseal::FitReport report = verifiedFit(step);
  ASSERT_TRUE(report.predicted_max_size.has_value()) << report.toText();
  EXPECT_GT(*report.predicted_max_size, 1000);
  ASSERT_TRUE(report.verification.has_value());
  const memseal::FitReport::Verification& verification = *report.verification;
  EXPECT_TRUE(verification.missed);
  EXPECT_FALSE(verification.within_budget);
  EXPECT_FALSE(verification.searched.empty());
  ASSERT_TRUE(verification.measured_max_size.has_value()) << report.toText();
  // Bisection stops within 1%: 300 is the truth.
  EXPECT_LE(*verification.measured_max_size, 300) << report.toText();
  EXPECT_GE(*verification.measured_max_size, 297) << report.toText();
  ASSERT_TRUE(verification.smallest_failing_size.has_value());
  EXPECT_GT(*verification.smallest_failing_size, 300);
  EXPECT_LE(*verification.smallest_failing_size, 303);
  EXPECT_EQ(report.largestSize(), verification.measured_max_size);
  EXPECT_NE(report.toText().find("(measured peak"), std::string::npos) << report.toText();
  EXPECT_NE(report.toJson().find("\"largest_size_measured\": true"), std::string::npos);
}

TEST(FitCapacity, APredictionThatHoldsIsNotSearched) {
  SizedStep step = [](std::int64_t size, int) { (void)torch::empty({size * 1024}).sum(); };
  memseal::FitReport report = verifiedFit(step);
  ASSERT_TRUE(report.verification.has_value()) << report.toText();
  EXPECT_FALSE(report.verification->missed) << report.toText();
  EXPECT_TRUE(report.verification->searched.empty());
  EXPECT_EQ(report.largestSize(), report.predicted_max_size);
}

TEST(FitCapacity, ASizeThatThrowsDuringTheSearchCountsAsNotFitting) {
  SizedStep step = [](std::int64_t size, int) {
    if (size > 500) throw std::runtime_error("out of memory (test)");
    (void)torch::empty({size * 1024}).sum();
  };
  memseal::FitReport report = verifiedFit(step);
  ASSERT_TRUE(report.verification.has_value()) << report.toText();
  EXPECT_TRUE(report.verification->missed);
  EXPECT_NE(report.verification->error.find("out of memory (test)"), std::string::npos);
  ASSERT_TRUE(report.verification->measured_max_size.has_value()) << report.toText();
  EXPECT_GE(*report.verification->measured_max_size, 495);
  EXPECT_LE(*report.verification->measured_max_size, 500);
}

}  // namespace
