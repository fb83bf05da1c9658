// explainPeak and fitCapacity on real libtorch loops: roles by identity give exact sizes, deeper
// models keep more activations, inference has neither gradients nor optimizer state; the fit
// predicts a linear peak beyond what it measured and refuses to call a quadratic one linear.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "memseal/explain.h"
#include "memseal/torch_roles.h"

namespace {

std::int64_t storageBytes(const std::vector<torch::Tensor>& tensors) {
  std::int64_t bytes = 0;
  for (const torch::Tensor& tensor : tensors) bytes += static_cast<std::int64_t>(tensor.nbytes());
  return bytes;
}

torch::nn::Sequential mlp(int depth, int width, int inputs) {
  torch::nn::Sequential model;
  model->push_back(torch::nn::Linear(inputs, width));
  for (int i = 1; i < depth; ++i) {
    model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::Linear(width, width));
  }
  return model;
}

TEST(ExplainPeak, TrainingStepSplitsParametersGradientsAndAdamStateExactly) {
  torch::manual_seed(0);
  // Large layers, a small batch: the peak is in the optimizer's step, with every gradient and all
  // of Adam's state live.
  torch::nn::Sequential model = mlp(3, 512, 256);
  torch::optim::Adam optimizer(model->parameters(), 1e-3);
  auto step = [&](int) {
    optimizer.zero_grad();
    torch::Tensor loss = model->forward(torch::randn({4, 256})).pow(2).mean();
    loss.backward();
    optimizer.step();
  };
  memseal::ExplainOptions options;
  options.steps = 4;
  options.warmup = 2;
  options.roles = [&] { return memseal::rolesOf(*model, &optimizer); };
  memseal::PeakReport report = memseal::explainPeak(step, options);

  std::int64_t parameter_bytes = storageBytes(model->parameters());
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kParameters), parameter_bytes);
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kGradients), parameter_bytes);
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kOptimizerState), 2 * parameter_bytes);
  std::int64_t role_total = 0;
  for (const memseal::RoleBytes& role : report.roles) role_total += role.bytes;
  EXPECT_EQ(role_total, report.peak_bytes);
  EXPECT_TRUE(report.model_identified);
  EXPECT_TRUE(report.optimizer_identified);
  EXPECT_EQ(report.step_peaks.size(), 2u);
  EXPECT_FALSE(report.sites.empty());
}

TEST(ExplainPeak, BackwardNamesParametersAndGradientsWithoutBeingTold) {
  torch::manual_seed(0);
  torch::nn::Sequential model = mlp(2, 256, 128);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  memseal::PeakReport report = memseal::explainPeak([&](int) {
    optimizer.zero_grad();
    model->forward(torch::randn({8, 128})).pow(2).mean().backward();
    optimizer.step();
  });
  std::int64_t parameter_bytes = storageBytes(model->parameters());
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kParameters), parameter_bytes);
  EXPECT_GT(report.bytesOf(memseal::MemoryRole::kGradients), 0);
  EXPECT_LE(report.bytesOf(memseal::MemoryRole::kGradients), parameter_bytes);
  EXPECT_FALSE(report.model_identified);
}

// Narrow layers and a large batch: activations outweigh gradients, so the peak is where backward
// begins, with everything the graph saved still held.
std::int64_t activationsOfDepth(int depth) {
  torch::manual_seed(0);
  torch::nn::Sequential model = mlp(depth, 128, 128);
  memseal::ExplainOptions options;
  options.steps = 3;
  options.warmup = 1;
  options.roles = [&] { return memseal::rolesOf(*model); };
  memseal::PeakReport report = memseal::explainPeak(
      [&](int) {
        model->zero_grad();
        model->forward(torch::randn({1024, 128})).pow(2).mean().backward();
      },
      options);
  EXPECT_GT(report.bytesOf(memseal::MemoryRole::kActivations), 0) << report.toText();
  return report.bytesOf(memseal::MemoryRole::kActivations);
}

TEST(ExplainPeak, DeeperModelsKeepMoreActivations) {
  std::int64_t shallow = activationsOfDepth(2);
  std::int64_t deep = activationsOfDepth(6);
  EXPECT_GT(shallow, 0);
  // Each of the four more Linear + ReLU pairs saves at least its 1024 x 128 float input.
  EXPECT_GE(deep - shallow, 4 * 1024 * 128 * 4);
}

TEST(ExplainPeak, InferenceHasNoGradientsNorOptimizerStateNorActivations) {
  torch::manual_seed(0);
  torch::nn::Sequential model = mlp(3, 256, 256);
  model->eval();
  memseal::ExplainOptions options;
  options.roles = [&] { return memseal::rolesOf(*model); };
  memseal::PeakReport report = memseal::explainPeak(
      [&](int) {
        torch::NoGradGuard no_grad;
        (void)model->forward(torch::randn({64, 256})).sum().item<float>();
      },
      options);
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kGradients), 0);
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kOptimizerState), 0);
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kActivations), 0);
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kParameters), storageBytes(model->parameters()));
  EXPECT_GT(report.bytesOf(memseal::MemoryRole::kTemporaries), 0);
}

TEST(ExplainPeak, ScopesNameTheModules) {
  torch::manual_seed(0);
  torch::nn::Linear encoder(256, 256), head(256, 8);
  memseal::PeakReport report = memseal::explainPeak([&](int) {
    torch::Tensor hidden;
    {
      MEMSEAL_REGION("encoder");
      hidden = torch::relu(encoder->forward(torch::randn({512, 256})));
    }
    MEMSEAL_REGION("head");
    head->forward(hidden).pow(2).mean().backward();
  });
  bool encoder_activations = false;
  for (const memseal::ModuleBytes& module : report.modules) {
    if (module.module == "encoder") {
      encoder_activations =
          module.role_bytes[static_cast<int>(memseal::MemoryRole::kActivations)] > 0;
    }
  }
  EXPECT_TRUE(encoder_activations);
}

// Gradient accumulation: two backward passes per step, the second's activations on addresses the
// first one's freed. Each pass is told apart by when backward saw it.
TEST(ExplainPeak, MicroBatchesKeepTheirActivationsApart) {
  torch::manual_seed(0);
  torch::nn::Sequential model = mlp(4, 128, 128);
  memseal::ExplainOptions options;
  options.roles = [&] { return memseal::rolesOf(*model); };
  memseal::PeakReport report = memseal::explainPeak(
      [&](int) {
        model->zero_grad();
        for (int micro = 0; micro < 2; ++micro) {
          model->forward(torch::randn({1024, 128})).pow(2).mean().backward();
        }
      },
      options);
  EXPECT_GE(report.bytesOf(memseal::MemoryRole::kActivations), 3 * 1024 * 128 * 4)
      << report.toText();
  EXPECT_EQ(report.bytesOf(memseal::MemoryRole::kParameters), storageBytes(model->parameters()));
}

TEST(ExplainPeak, RejectsOptionsThatCannotWork) {
  memseal::ExplainOptions options;
  options.steps = 2;
  options.warmup = 2;
  EXPECT_THROW(memseal::explainPeak([](int) {}, options), std::invalid_argument);
}

TEST(ExplainPeak, JsonCarriesSchemaAndSixRoles) {
  torch::manual_seed(0);
  torch::nn::Linear layer(64, 64);
  memseal::PeakReport report = memseal::explainPeak([&](int) {
    layer->forward(torch::randn({32, 64})).sum().backward();
  });
  std::string json = report.toJson();
  EXPECT_NE(json.find("\"schema\": \"memseal.explain/1\""), std::string::npos);
  EXPECT_EQ(report.roles.size(), 6u);
  EXPECT_NE(report.toText().find("activations"), std::string::npos);
}

// ---- what would lower the peak ----

// Three blocks in regions, SGD: the peak is where backward begins, with every activation saved and
// (unless set to None) last step's zeroed gradients live.
memseal::PeakReport explainBlocks(bool set_to_none) {
  torch::manual_seed(0);
  torch::nn::Sequential blocks[3] = {mlp(2, 1024, 256), mlp(2, 1024, 1024), mlp(2, 256, 1024)};
  std::vector<torch::Tensor> parameters;
  for (auto& block : blocks) {
    for (const auto& parameter : block->parameters()) parameters.push_back(parameter);
  }
  torch::optim::SGD optimizer(parameters, 0.01);
  torch::Tensor inputs = torch::randn({4096, 256});
  auto step = [&](int) {
    optimizer.zero_grad(set_to_none);
    torch::Tensor x;
    {
      MEMSEAL_REGION("net/a");
      x = blocks[0]->forward(inputs);
    }
    {
      MEMSEAL_REGION("net/b");
      x = blocks[1]->forward(x);
    }
    {
      MEMSEAL_REGION("net/c");
      x = blocks[2]->forward(x);
    }
    x.pow(2).mean().backward();
    optimizer.step();
  };
  memseal::ExplainOptions options;
  options.steps = 4;
  options.warmup = 2;
  options.roles = [&] { return memseal::RoleTensors{parameters, {}, {}}; };
  return memseal::explainPeak(step, options);
}

const memseal::PeakRemedy* remedyOf(const memseal::PeakReport& report, const std::string& kind,
                                    const std::string& target = "") {
  for (const memseal::PeakRemedy& remedy : report.remedies) {
    if (remedy.kind == kind && remedy.target == target) return &remedy;
  }
  return nullptr;
}

TEST(ExplainPeak, GradientsSetToNoneRemoveWhatTheRemedySays) {
  memseal::PeakReport kept = explainBlocks(/*set_to_none=*/false);
  const memseal::PeakRemedy* to_none = remedyOf(kept, "gradients-to-none");
  ASSERT_NE(to_none, nullptr) << kept.toText();
  memseal::PeakReport freed = explainBlocks(/*set_to_none=*/true);
  double removed = static_cast<double>(kept.peak_bytes - freed.peak_bytes);
  EXPECT_LE(std::abs(removed - static_cast<double>(to_none->bytes)), 0.10 * to_none->bytes)
      << kept.toText() << freed.toText();
  EXPECT_EQ(remedyOf(freed, "gradients-to-none"), nullptr) << freed.toText();
  // Checkpointing is offered per region; the whole model ("net") is not.
  EXPECT_NE(remedyOf(kept, "checkpoint-module", "net/b"), nullptr) << kept.toText();
  EXPECT_EQ(remedyOf(kept, "checkpoint-module", "net"), nullptr);
  for (std::size_t i = 1; i < kept.remedies.size(); ++i) {
    EXPECT_GE(kept.remedies[i - 1].bytes, kept.remedies[i].bytes);
  }
  EXPECT_NE(kept.toJson().find("\"remedies\""), std::string::npos);
}

// ---- capacity ----

// Narrow layers: activations, linear in the batch, dominate the peak at every size measured.
memseal::FitReport fitMlp(const std::vector<std::int64_t>& sizes,
                          std::optional<std::int64_t> budget, bool verify) {
  torch::manual_seed(0);
  torch::nn::Sequential model = mlp(3, 64, 64);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  memseal::FitOptions options;
  options.sizes = sizes;
  options.budget_bytes = budget;
  options.verify = verify;
  return memseal::fitCapacity(
      [&](std::int64_t batch, int) {
        optimizer.zero_grad();
        model->forward(torch::randn({batch, 64})).pow(2).mean().backward();
        optimizer.step();
      },
      options);
}

TEST(FitCapacity, PredictsALinearPeakThreeTimesBeyondTheLargestMeasured) {
  const std::vector<std::int64_t> sizes = {128, 256, 384, 512};
  memseal::FitReport measured = fitMlp(sizes, std::nullopt, false);
  // Each phase is a line too: the model is the highest of them.
  ASSERT_EQ(measured.model, "phases") << measured.toText();
  EXPECT_TRUE(measured.is_linear);
  // A budget whose largest fitting size is 1536 = 3 x 512; verify measures that size.
  double at_1536 = *measured.predictPeak(1536);
  auto budget = static_cast<std::int64_t>(at_1536 / (1 - measured.margin)) + 1;
  memseal::FitReport verified = fitMlp(sizes, budget, true);
  ASSERT_TRUE(verified.predicted_max_size.has_value());
  EXPECT_EQ(*verified.predicted_max_size, 1536);
  ASSERT_TRUE(verified.verification.has_value());
  EXPECT_TRUE(verified.verification->error.empty());
  EXPECT_LT(std::abs(verified.verification->relative_error), 0.05) << verified.toText();
  EXPECT_TRUE(verified.verification->within_budget);
}

TEST(FitCapacity, AttentionOverSequenceLengthIsNotLinear) {
  auto attention = [](std::int64_t length, int) {
    torch::NoGradGuard no_grad;
    torch::Tensor q = torch::randn({length, 64});
    torch::Tensor k = torch::randn({length, 64});
    torch::Tensor scores = torch::softmax(q.matmul(k.t()), -1);
    (void)scores.matmul(q).sum().item<float>();
  };
  memseal::FitOptions options;
  options.sizes = {64, 128, 256, 512};
  options.budget_bytes = std::int64_t{1} << 34;
  memseal::FitReport report = memseal::fitCapacity(attention, options);
  EXPECT_FALSE(report.is_linear);
  ASSERT_NE(report.model, "linear");
  if (report.model == "quadratic") {
    options.sizes = {1536, 1537, 1538};
    options.budget_bytes = std::nullopt;
    memseal::FitReport far = memseal::fitCapacity(attention, options);
    double predicted = *report.predictPeak(1536);
    double measured = static_cast<double>(far.points.front().peak_bytes);
    EXPECT_LT(std::abs(predicted - measured) / measured, 0.05);
  } else {
    EXPECT_FALSE(report.refusal.empty());
  }
}

TEST(FitPeaks, RefusesFewerThanThreePointsAndThreeThatAreNotLinear) {
  memseal::FitOptions options;
  options.budget_bytes = 1000000;
  EXPECT_FALSE(memseal::fitPeaks({{1, 100}, {2, 200}}, options).refusal.empty());
  memseal::FitReport curved = memseal::fitPeaks({{1, 100}, {2, 400}, {4, 1600}}, options);
  EXPECT_EQ(curved.model, "none");
  EXPECT_FALSE(curved.predicted_max_size.has_value());
  memseal::FitReport line = memseal::fitPeaks({{1, 1100}, {2, 1200}, {4, 1400}}, options);
  EXPECT_EQ(line.model, "linear");
  // 1000 + 100 s <= 900000  ->  s = 8990
  ASSERT_TRUE(line.predicted_max_size.has_value());
  EXPECT_EQ(*line.predicted_max_size, 8990);
  // A parabola that bends down would promise unbounded room: refused, not extrapolated.
  auto concave = [](double s) { return static_cast<std::int64_t>(1e6 + 1e5 * s - 2e3 * s * s); };
  memseal::FitReport bent = memseal::fitPeaks(
      {{1, concave(1)}, {2, concave(2)}, {4, concave(4)}, {8, concave(8)}}, options);
  EXPECT_NE(bent.model, "quadratic");
  EXPECT_FALSE(bent.predicted_max_size.has_value());
  EXPECT_THROW(memseal::fitPeaks({{1, 1}, {1, 2}, {3, 3}}, options), std::invalid_argument);
  options.margin = 1.5;
  EXPECT_THROW(memseal::fitPeaks({{1, 1}, {2, 2}, {3, 3}}, options), std::invalid_argument);
}

TEST(ParseByteSize, ReadsUnitsAndRefusesNonsense) {
  EXPECT_EQ(memseal::parseByteSize("16GiB"), std::int64_t{16} << 30);
  EXPECT_EQ(memseal::parseByteSize("512 MiB"), std::int64_t{512} << 20);
  EXPECT_EQ(memseal::parseByteSize("1.5G"), std::int64_t{3} << 29);
  EXPECT_EQ(memseal::parseByteSize("2GB"), std::int64_t{2000000000});
  EXPECT_EQ(memseal::parseByteSize("4096"), 4096);
  EXPECT_FALSE(memseal::parseByteSize("-1G").has_value());
  EXPECT_FALSE(memseal::parseByteSize("lots").has_value());
  EXPECT_FALSE(memseal::parseByteSize("3 parsecs").has_value());
}

// ---- the trace ----

TEST(MemoryTrace, CountsEveryAllocationAndFreeOfATrackedLoop) {
  memseal::Tracker tracker;
  tracker.start();
  memseal::MemoryTrace trace;
  trace.start();
  memseal::DeviceStats before = tracker.stats();
  torch::Tensor kept = torch::ones({64, 64});
  for (int i = 0; i < 10; ++i) (void)(torch::randn({32, 32}) * 2).sum().item<float>();
  memseal::DeviceStats after = tracker.stats();
  trace.stop();
  EXPECT_EQ(static_cast<std::int64_t>(trace.allocations()),
            after.allocations_total - before.allocations_total);
  EXPECT_EQ(static_cast<std::int64_t>(trace.frees()), after.frees_total - before.frees_total);
  EXPECT_EQ(trace.liveBytes(), after.live_bytes);
  std::string pickle = trace.memoryVizPickle();
  EXPECT_FALSE(pickle.empty());
  memseal::MemoryTrace second;
  memseal::MemoryTrace third;
  second.start();
  EXPECT_THROW(third.start(), std::logic_error);
}

}  // namespace
