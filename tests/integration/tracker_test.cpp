// The tracker on real libtorch code: exact byte counts, op attribution, tensor metadata, scopes,
// stacks, start/stop/restart and tensors that outlive the tracker.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>

#include <c10/core/CPUAllocator.h>

#include "memseal/tracker.h"

// Outside namespace memseal: frames in memseal:: count as memseal's own, not the user's.
__attribute__((noinline)) torch::Tensor allocateFromANamedFunction() { return torch::ones({77}); }

namespace memseal {
namespace {

// Takes the snapshot by reference: the returned pointer points into it.
const SiteSnapshot* findSite(const Snapshot& snapshot, const std::string& outer_op) {
  for (const SiteSnapshot& site : snapshot.sites) {
    if (site.site.outer_op == outer_op) return &site;
  }
  return nullptr;
}

TEST(Tracker, AttributesATensorsBytesToTheOpThatMadeIt) {
  Tracker tracker;
  tracker.start();
  std::int64_t baseline = tracker.stats().live_bytes;
  torch::Tensor ones = torch::ones({1000}, torch::kFloat);
  Snapshot snapshot = tracker.snapshot();
  EXPECT_EQ(snapshot.cpu.live_bytes - baseline, 4000);
  const SiteSnapshot* site = findSite(snapshot, "aten::ones");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->live_bytes, 4000);
  EXPECT_EQ(site->live_count, 1);
  ASSERT_EQ(site->allocations.size(), 1u);
  const TensorInfo& tensor = site->allocations[0].tensor;
  ASSERT_TRUE(tensor.known);
  EXPECT_EQ(tensor.shape, std::vector<std::int64_t>{1000});
  EXPECT_EQ(tensor.dtype, "Float");
  EXPECT_FALSE(tensor.requires_grad);
  EXPECT_TRUE(tensor.grad_fn.empty());
}

TEST(Tracker, LiveBytesReturnExactlyToBaselineAfterRelease) {
  Tracker tracker;
  tracker.start();
  DeviceStats before = tracker.stats();
  {
    torch::Tensor a = torch::randn({128, 64});
    torch::Tensor b = torch::randn({64, 32});
    torch::Tensor c = torch::mm(a, b).relu().sum(0);
    EXPECT_GT(tracker.stats().live_bytes, before.live_bytes);
  }
  DeviceStats after = tracker.stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.live_count, before.live_count);
  EXPECT_EQ(after.allocations_total - before.allocations_total,
            after.frees_total - before.frees_total);
  EXPECT_GE(after.peak_bytes, (128 * 64 + 64 * 32 + 128 * 32) * 4);
}

TEST(Tracker, RecordsAutogradMetadataOfOpOutputs) {
  Tracker tracker;
  tracker.start();
  torch::Tensor x = torch::randn({8, 4}, torch::requires_grad());
  torch::Tensor y = x.mul(torch::full({8, 4}, 2.0));
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::mul");
  ASSERT_NE(site, nullptr);
  ASSERT_FALSE(site->allocations.empty());
  const TensorInfo& tensor = site->allocations[0].tensor;
  EXPECT_EQ(tensor.shape, (std::vector<std::int64_t>{8, 4}));
  EXPECT_TRUE(tensor.requires_grad);
  EXPECT_FALSE(tensor.is_leaf);
  EXPECT_EQ(tensor.grad_fn, "MulBackward0");
  EXPECT_TRUE(site->allocations[0].grad_mode);
  EXPECT_FALSE(site->allocations[0].inference_mode);
}

TEST(Tracker, ParametersShowRequiresGradSetAfterTheirAllocation) {
  Tracker tracker;
  tracker.start();
  torch::nn::Linear layer(16, 8);  // the weight is made by aten::empty, then marked requires_grad
  Snapshot snapshot = tracker.snapshot();
  bool found_weight = false;
  for (const SiteSnapshot& site : snapshot.sites) {
    for (const LiveAllocation& allocation : site.allocations) {
      if (allocation.tensor.shape == std::vector<std::int64_t>{8, 16}) {
        found_weight = true;
        EXPECT_TRUE(allocation.tensor.requires_grad);
        EXPECT_TRUE(allocation.tensor.is_leaf);
      }
    }
  }
  EXPECT_TRUE(found_weight);
}

TEST(Tracker, RecordsInferenceModeAndStep) {
  Tracker tracker;
  tracker.start();
  setStep(41);
  torch::Tensor inside;
  {
    c10::InferenceMode guard;
    inside = torch::full({10}, 1.0);
  }
  setStep(0);
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::full");
  ASSERT_NE(site, nullptr);
  EXPECT_TRUE(site->allocations[0].inference_mode);
  EXPECT_EQ(site->allocations[0].step, 41u);
}

TEST(Tracker, ForwardAndBackwardOfASmallModelReleaseEverything) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(32, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 4));
  torch::Tensor input = torch::randn({16, 32});
  Tracker tracker;
  tracker.start();
  DeviceStats before = tracker.stats();
  {
    torch::Tensor loss = model->forward(input).pow(2).mean();
    loss.backward();
  }
  // Gradients are the only survivors: one per parameter, exactly the parameters' bytes.
  std::int64_t parameter_bytes = 0;
  for (const torch::Tensor& p : model->parameters()) parameter_bytes += p.numel() * 4;
  EXPECT_EQ(tracker.stats().live_bytes - before.live_bytes, parameter_bytes);
  for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  EXPECT_EQ(tracker.stats().live_bytes, before.live_bytes);
  EXPECT_GT(tracker.stats().peak_bytes, parameter_bytes);
}

TEST(Tracker, AttributesAllocationsToNestedUserScopes) {
  Tracker tracker;
  tracker.start();
  torch::Tensor kept;
  {
    MEMSEAL_SCOPE("preprocess");
    {
      MEMSEAL_SCOPE("normalize");
      kept = torch::zeros({256});
    }
  }
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::zeros");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->site.scope, "preprocess/normalize");
}

TEST(Tracker, StacksNameTheUsersFunctionAndLine) {
  Tracker tracker(TrackerOptions{StackMode::kOn});
  tracker.start();
  torch::Tensor kept = allocateFromANamedFunction();
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::ones");
  ASSERT_NE(site, nullptr);
  auto user_frame = std::find_if(site->site.frames.begin(), site->site.frames.end(),
                                 [](const StackFrame& f) { return !f.is_internal; });
  ASSERT_NE(user_frame, site->site.frames.end());
  EXPECT_NE(user_frame->function.find("allocateFromANamedFunction"), std::string::npos)
      << user_frame->function;
  EXPECT_NE(user_frame->file.find("tracker_test.cpp"), std::string::npos);
}

TEST(Tracker, SampledStacksCaptureEveryNthAllocation) {
  Tracker tracker(TrackerOptions{StackMode::kSampled, 4});
  tracker.start();
  std::vector<torch::Tensor> kept;
  for (int i = 0; i < 16; ++i) kept.push_back(allocateFromANamedFunction());
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::ones");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->live_count, 16);  // sampling never splits a site
  EXPECT_FALSE(site->site.frames.empty());
}

TEST(Tracker, OnlyOneTrackerRunsAtATime) {
  Tracker first;
  first.start();
  Tracker second;
  EXPECT_THROW(second.start(), std::logic_error);
  first.stop();
  EXPECT_NO_THROW(second.start());
}

TEST(Tracker, TensorsFromBeforeStartFreedWhileTrackingDoNotChangeCounts) {
  torch::Tensor old_tensor = torch::ones({5000});
  Tracker tracker;
  tracker.start();
  DeviceStats before = tracker.stats();
  old_tensor = torch::Tensor();
  DeviceStats after = tracker.stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.frees_total, before.frees_total);
}

TEST(Tracker, TensorsOutlivingStopRestartAndTheTrackerStayValid) {
  torch::Tensor survivor;
  torch::Tensor from_first_session;
  {
    Tracker tracker;
    tracker.start();
    survivor = torch::arange(1000, torch::kFloat);
    from_first_session = torch::ones({300});
    tracker.stop();
    EXPECT_FALSE(trackingActive());
    tracker.start();  // restart: a new session starts from zero
    EXPECT_EQ(tracker.stats().live_bytes, 0);
    from_first_session = torch::Tensor();  // freed during the second session: not counted there
    EXPECT_EQ(tracker.stats().live_bytes, 0);
    EXPECT_EQ(tracker.stats().frees_total, 0);
    torch::Tensor fresh = torch::ones({10});
    EXPECT_EQ(tracker.stats().live_bytes, 40);
  }
  // The tracker is gone; the tensor's memory is still intact and frees cleanly.
  EXPECT_FLOAT_EQ(survivor.sum().item<float>(), 999.0f * 1000.0f / 2.0f);
  survivor = torch::Tensor();
  EXPECT_FALSE(trackingActive());
}

TEST(Tracker, RawAllocateAndDeallocateWork) {
  Tracker tracker;
  tracker.start();
  std::int64_t before = tracker.stats().live_bytes;
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* memory = allocator->raw_allocate(512);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(tracker.stats().live_bytes - before, 512);
  allocator->raw_deallocate(memory);
  EXPECT_EQ(tracker.stats().live_bytes, before);
}

TEST(Tracker, RestoresThePreviousAllocatorOnStop) {
  c10::Allocator* before = c10::GetCPUAllocator();
  {
    Tracker tracker;
    tracker.start();
    EXPECT_NE(c10::GetCPUAllocator(), before);
  }
  EXPECT_EQ(c10::GetCPUAllocator(), before);
}

TEST(TrackerOptions, ReadsTheEnvironmentAndRejectsNonsense) {
  setenv("MEMSEAL_STACKS", "sample:16", 1);
  TrackerOptions options = TrackerOptions::fromEnvironment();
  EXPECT_EQ(options.stacks, StackMode::kSampled);
  EXPECT_EQ(options.stack_sample_every, 16u);
  setenv("MEMSEAL_STACKS", "sometimes", 1);
  EXPECT_THROW(TrackerOptions::fromEnvironment(), std::invalid_argument);
  setenv("MEMSEAL_STACKS", "sample:0", 1);
  EXPECT_THROW(TrackerOptions::fromEnvironment(), std::invalid_argument);
  unsetenv("MEMSEAL_STACKS");
}

}  // namespace
}  // namespace memseal
