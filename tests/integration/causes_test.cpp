// One finding per cause where the lines of the code cannot tell the parts of a cause apart: a kept
// loss whose step boundary falls inside the forward pass (as `memseal run` cuts an unmodified
// program's loop where its op sequence repeats), so that the graph nodes each step leaves alive are
// made on another line than the loss that keeps them.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "integration/detector_helpers.h"
#include "memseal/leak_detector.h"

namespace memseal {
namespace {

DetectorOptions trainingOptions(std::uint32_t steps) {
  DetectorOptions options;
  options.steps = steps;
  options.warmup = 5;
  options.on_leak = ReportPolicy::kNone;
  return options;
}

// A small MNIST-like network trained with SGD; `losses` keeps every step's loss with its graph.
// The trunk of each iteration runs at the end of a step, its head (dropout, the classifier, the
// loss and backward) at the start of the next.
struct CutTraining {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 4, 3)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(4, 8, 3)};
  torch::nn::Dropout2d conv2_drop{0.5};
  torch::nn::Linear fc{8 * 3 * 3, 10};
  torch::optim::SGD optimizer{std::vector<torch::Tensor>{}, torch::optim::SGDOptions(0.01)};
  torch::Tensor features;  // the trunk's output of the last step, its head still to run
  std::vector<torch::Tensor> losses;

  CutTraining() {
    std::vector<torch::Tensor> parameters;
    for (auto* module :
         std::initializer_list<torch::nn::Module*>{conv1.get(), conv2.get(), fc.get()}) {
      for (const torch::Tensor& parameter : module->parameters()) parameters.push_back(parameter);
    }
    optimizer.add_param_group(torch::optim::OptimizerParamGroup(parameters));
  }

  void step(bool keep_losses) {
    if (features.defined()) {
      torch::Tensor x = torch::relu(torch::max_pool2d(conv2_drop(features), 2));
      torch::Tensor output = torch::log_softmax(fc(x.flatten(1)), 1);
      torch::Tensor loss = torch::nll_loss(output, torch::randint(0, 10, {16}));
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      if (keep_losses) losses.push_back(loss);
    }
    features = conv2(torch::relu(torch::max_pool2d(conv1(torch::randn({16, 1, 20, 20})), 2)));
  }
};

// The nodes each step leaves alive, newest first, are the dropout's of the next iteration: the
// finding is the kept loss's all the same, named by the loss, with the graph as what it holds. With
// stacks on (the lines tell the loss's line from the dropout's) and off (no line tells anything).
class KeptLossCutFromItsForwardPass : public ::testing::TestWithParam<StackMode> {};

TEST_P(KeptLossCutFromItsForwardPass, IsOneFindingNamedByTheLoss) {
  auto training = std::make_shared<CutTraining>();
  DetectorOptions options = trainingOptions(30);
  options.tracker.stacks = GetParam();
  LeakReport report = check([training](int) { training->step(true); }, options);
  ASSERT_TRUE(report.leak) << report.toText();
  ASSERT_EQ(report.findings.size(), 1u) << report.toText();
  const LeakFinding& finding = report.findings[0];
  EXPECT_EQ(finding.category, LeakCategory::kAutogradGraphRetained) << report.toText();
  EXPECT_EQ(finding.site.outer_op, "aten::nll_loss") << report.toText();
  EXPECT_EQ(finding.tensor.grad_fn, "NllLossBackward0") << report.toText();
  bool holds_graph = std::any_of(finding.parts.begin(), finding.parts.end(), [](const LeakPart& p) {
    return p.retained == "autograd graph nodes";
  });
  EXPECT_TRUE(holds_graph) << report.toText();
}

INSTANTIATE_TEST_SUITE_P(Causes, KeptLossCutFromItsForwardPass,
                         ::testing::Values(StackMode::kOn, StackMode::kOff),
                         [](const ::testing::TestParamInfo<StackMode>& info) {
                           return info.param == StackMode::kOn ? "StacksOn" : "StacksOff";
                         });

TEST(Causes, TheSameTrainingWithoutTheKeptLossesIsNoLeak) {
  auto training = std::make_shared<CutTraining>();
  LeakReport report = check([training](int) { training->step(false); }, trainingOptions(30));
  EXPECT_FALSE(report.leak) << report.toText();
}

}  // namespace
}  // namespace memseal
