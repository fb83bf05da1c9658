// The tracker on real libtorch code: exact byte counts, op attribution, tensor metadata, scopes,
// stacks, start/stop/restart and tensors that outlive the tracker.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>

#include "integration/snapshot_helpers.h"
#include "memseal/leak_detector.h"
#include "memseal/scope.h"
#include "memseal/tracker.h"

// Outside namespace memseal: frames in memseal:: count as memseal's own, not the user's.
__attribute__((noinline)) torch::Tensor allocateFromANamedFunction() { return torch::ones({77}); }

namespace memseal {
namespace {

using test::findSite;

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

// A site's totals count its own session only, also the part a thread still kept for itself when
// the session before ended.
TEST(Tracker, SiteTotalsStartAgainWithEachSession) {
  auto allocationsInRegion = [](Tracker& tracker) -> std::int64_t {
    for (const SiteSnapshot& site : tracker.snapshot().sites) {
      if (site.site.scope == "totals-per-session") return site.allocations_total;
    }
    return -1;
  };
  torch::Tensor kept;
  {
    Tracker first;
    first.start();
    MEMSEAL_REGION("totals-per-session");
    for (int i = 0; i < 5; ++i) kept = torch::empty({16});
    EXPECT_EQ(allocationsInRegion(first), 5);
    first.stop();
  }
  Tracker second;
  second.start();
  MEMSEAL_REGION("totals-per-session");
  kept = torch::empty({16});
  EXPECT_EQ(allocationsInRegion(second), 1);
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

// The modes are read from the thread's autograd state at every allocation (the hook keeps where
// that state is, once per thread): a thread whose first record is made under no_grad records grad
// mode on once it is back on, and inference mode where it is entered later.
TEST(Tracker, RecordsTheAutogradModesEachAllocationWasMadeIn) {
  Tracker tracker;
  tracker.start();
  torch::Tensor no_grad_first;
  torch::Tensor grad_after;
  torch::Tensor inference_last;
  std::thread worker([&] {
    {
      torch::NoGradGuard no_grad;
      no_grad_first = torch::full({11}, 1.0);
    }
    grad_after = torch::full({12}, 1.0);
    c10::InferenceMode inference;
    inference_last = torch::full({13}, 1.0);
  });
  worker.join();
  Snapshot snapshot = tracker.snapshot();
  auto madeWithShape = [&snapshot](std::int64_t size) -> std::optional<LiveAllocation> {
    for (const SiteSnapshot& site : snapshot.sites) {
      for (const LiveAllocation& allocation : site.allocations) {
        if (allocation.tensor.shape == std::vector<std::int64_t>{size}) return allocation;
      }
    }
    return std::nullopt;
  };
  std::optional<LiveAllocation> first = madeWithShape(11);
  std::optional<LiveAllocation> after = madeWithShape(12);
  std::optional<LiveAllocation> last = madeWithShape(13);
  ASSERT_TRUE(first && after && last);
  EXPECT_FALSE(first->grad_mode);
  EXPECT_FALSE(first->inference_mode);
  EXPECT_TRUE(after->grad_mode);
  EXPECT_FALSE(after->inference_mode);
  EXPECT_TRUE(last->inference_mode);
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
    MEMSEAL_REGION("preprocess");
    {
      MEMSEAL_REGION("normalize");
      kept = torch::zeros({256});
    }
  }
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::zeros");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->site.scope, "preprocess/normalize");
}

// A thread remembers the site it looked up last; allocations that alternate between places, by op
// or by region, must each still land at their own site, and the counts add up.
TEST(Tracker, AllocationsAlternatingBetweenPlacesEachKeepTheirSite) {
  TrackerOptions options;
  options.stacks = StackMode::kOff;
  Tracker tracker(options);
  tracker.start();
  std::vector<torch::Tensor> kept;
  for (int i = 0; i < 5; ++i) {
    kept.push_back(torch::zeros({8}));
    kept.push_back(torch::ones({8}));
    {
      MEMSEAL_REGION("alternating-left");
      kept.push_back(torch::zeros({8}));
    }
    kept.push_back(torch::zeros({8}));
    {
      MEMSEAL_REGION("alternating-right");
      kept.push_back(torch::zeros({8}));
    }
  }
  std::map<std::pair<std::string, std::string>, std::int64_t> live_by_op_and_region;
  for (const SiteSnapshot& site : tracker.snapshot().sites) {
    live_by_op_and_region[{site.site.outer_op, site.site.scope}] += site.live_count;
  }
  EXPECT_EQ((live_by_op_and_region[{"aten::zeros", ""}]), 10);
  EXPECT_EQ((live_by_op_and_region[{"aten::ones", ""}]), 5);
  EXPECT_EQ((live_by_op_and_region[{"aten::zeros", "alternating-left"}]), 5);
  EXPECT_EQ((live_by_op_and_region[{"aten::zeros", "alternating-right"}]), 5);
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

// Sites outlive sessions (the site table is the process's); the stack a sampling session kept as a
// site's example must not show up in a later session that asked for no stacks.
TEST(Tracker, AStackSampledInAnEarlierSessionIsNotShownWithStacksOff) {
  std::vector<torch::Tensor> kept;
  {
    Tracker sampling(TrackerOptions{StackMode::kSampled, 1});
    sampling.start();
    kept.push_back(allocateFromANamedFunction());
    Snapshot snapshot = sampling.snapshot();
    const SiteSnapshot* site = findSite(snapshot, "aten::ones");
    ASSERT_NE(site, nullptr);
    ASSERT_FALSE(site->site.frames.empty());
  }
  kept.clear();
  Tracker without_stacks(TrackerOptions{StackMode::kOff});
  without_stacks.start();
  kept.push_back(allocateFromANamedFunction());
  Snapshot snapshot = without_stacks.snapshot();
  const SiteSnapshot* site = findSite(snapshot, "aten::ones");
  ASSERT_NE(site, nullptr);
  EXPECT_TRUE(site->site.frames.empty());
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

const SiteSnapshot* findSiteByOp(const Snapshot& snapshot, const std::string& op) {
  for (const SiteSnapshot& site : snapshot.sites) {
    if (site.site.op == op) return &site;
  }
  return nullptr;
}

constexpr const char* kUnwatched = "<op not watched on this step>";

TEST(Tracker, OpsWatchedOnOneStepInNAttributeTheOtherStepsByReplay) {
  TrackerOptions options;
  options.watch_ops = OpWatching::oneStepIn(4);
  Tracker tracker(options);
  tracker.start();
  std::vector<torch::Tensor> kept;
  for (std::uint32_t step = 0; step < 8; ++step) {
    setStep(step);
    // RecordFunction, whose cost this option saves, runs only on the watched steps.
    EXPECT_EQ(at::hasGlobalCallbacks(), step % 4 == 0) << "step " << step;
    torch::Tensor scratch = torch::randn({64, 32});
    kept.push_back(torch::arange(50, torch::kFloat));
    kept.push_back(scratch.sum(0));
  }
  Snapshot snapshot = tracker.snapshot(8);
  tracker.stop();
  setStep(0);
  EXPECT_FALSE(at::hasGlobalCallbacks());
  EXPECT_EQ(findSiteByOp(snapshot, kUnwatched), nullptr);
  const SiteSnapshot* arange = findSite(snapshot, "aten::arange");
  const SiteSnapshot* sum = findSite(snapshot, "aten::sum");
  ASSERT_NE(arange, nullptr);
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(arange->live_count, 8);
  EXPECT_EQ(arange->live_bytes, 8 * 50 * 4);
  EXPECT_EQ(sum->live_count, 8);
  // Also the allocations of unwatched steps carry the tensor signature of the watched one.
  ASSERT_EQ(arange->allocations.size(), 8u);
  for (const LiveAllocation& allocation : arange->allocations) {
    ASSERT_TRUE(allocation.tensor.known) << "step " << allocation.step;
    EXPECT_EQ(allocation.tensor.shape, std::vector<std::int64_t>{50});
  }
  for (const LiveAllocation& allocation : sum->allocations) {
    EXPECT_EQ(allocation.tensor.shape, std::vector<std::int64_t>{32});
  }
}

// A replayed allocation takes its site and signature from the recording and everything else from
// its own moment: its step, the autograd mode it was made in and the lifetime scope it was made in
// (the hook writes such a record straight into the live table, apart from the watched steps' path).
TEST(Tracker, AReplayedAllocationRecordsItsOwnStepModeAndScope) {
  TrackerOptions options;
  options.watch_ops = OpWatching::oneStepIn(4);
  Tracker tracker(options);
  tracker.start();
  std::vector<torch::Tensor> kept;
  // Two allocations a step: a step's first allocation also moves the replay to the new step, and
  // the second is the plain replayed one.
  setStep(0);  // watched: recorded with grad mode on, outside any scope
  kept.push_back(torch::full({10}, 1.0));
  kept.push_back(torch::full({20}, 1.0));
  setStep(1);  // replayed
  ScopeOptions scope_options;
  scope_options.on_survivors = ReportPolicy::kNone;
  LifetimeScope scope("replayed", scope_options);
  {
    torch::NoGradGuard no_grad;
    kept.push_back(torch::full({10}, 1.0));
    kept.push_back(torch::full({20}, 1.0));
  }
  ScopeReport report = scope.close();
  Snapshot snapshot = tracker.snapshot(8);
  tracker.stop();
  setStep(0);
  EXPECT_EQ(findSiteByOp(snapshot, kUnwatched), nullptr);
  const SiteSnapshot* full = findSite(snapshot, "aten::full");
  ASSERT_NE(full, nullptr);
  ASSERT_EQ(full->allocations.size(), 4u);
  for (const LiveAllocation& allocation : full->allocations) {
    bool replayed = allocation.step == 1;
    EXPECT_TRUE(replayed || allocation.step == 0) << allocation.step;
    EXPECT_EQ(allocation.grad_mode, !replayed) << "step " << allocation.step;
    ASSERT_TRUE(allocation.tensor.known);
    EXPECT_EQ(allocation.bytes, static_cast<std::size_t>(allocation.tensor.shape.at(0)) * 4);
  }
  EXPECT_EQ(full->allocations[0].step, 1u);  // newest first
  EXPECT_EQ(full->allocations[0].tensor.shape, std::vector<std::int64_t>{20});
  // The scope saw the replayed allocations as made inside it.
  EXPECT_EQ(report.stats.made, 2);
  ASSERT_EQ(report.stats.survivors, 2);
  for (const ScopeSurvivor& survivor : report.survivors) {
    EXPECT_EQ(survivor.allocation.step, 1u);
    EXPECT_EQ(survivor.site.outer_op, "aten::full");
  }
}

TEST(Tracker, AStepThatAllocatesOtherwiseThanTheWatchedOneIsNotGuessed) {
  TrackerOptions options;
  options.watch_ops = OpWatching::oneStepIn(4);
  Tracker tracker(options);
  tracker.start();
  std::vector<torch::Tensor> kept;
  setStep(0);  // watched: recorded
  kept.push_back(torch::ones({10}));
  kept.push_back(torch::zeros({20}));
  setStep(1);
  kept.push_back(torch::ones({10}));   // as recorded
  kept.push_back(torch::zeros({30}));  // another size: not guessed
  kept.push_back(torch::ones({10}));   // after a mismatch: not guessed either
  setStep(2);
  {
    MEMSEAL_REGION("elsewhere");
    kept.push_back(torch::ones({10}));  // the recorded size, in another scope
  }
  setStep(4);                          // watched again
  kept.push_back(torch::zeros({30}));  // named by its op
  Snapshot snapshot = tracker.snapshot(8);
  tracker.stop();
  setStep(0);
  const SiteSnapshot* ones = findSite(snapshot, "aten::ones");
  const SiteSnapshot* zeros = findSite(snapshot, "aten::zeros");
  ASSERT_NE(ones, nullptr);
  ASSERT_NE(zeros, nullptr);
  EXPECT_EQ(ones->live_count, 2);   // steps 0 and 1
  EXPECT_EQ(zeros->live_count, 2);  // step 0, step 4
  EXPECT_EQ(zeros->live_bytes, 80 + 120);
  std::int64_t unwatched_bytes = 0;
  std::int64_t unwatched_count = 0;
  for (const SiteSnapshot& site : snapshot.sites) {
    if (site.site.op != kUnwatched) continue;
    unwatched_bytes += site.live_bytes;
    unwatched_count += site.live_count;
    for (const LiveAllocation& allocation : site.allocations) {
      EXPECT_FALSE(allocation.tensor.known);
    }
  }
  EXPECT_EQ(unwatched_count, 3);
  EXPECT_EQ(unwatched_bytes, 120 + 40 + 40);
}

TEST(Tracker, RejectsOpsWatchedOnOneStepInZero) {
  TrackerOptions zero;
  zero.watch_ops = OpWatching::oneStepIn(0);
  Tracker tracker(zero);
  EXPECT_THROW(tracker.start(), std::invalid_argument);
  EXPECT_FALSE(tracker.running());
  TrackerOptions zero_sampling;
  zero_sampling.stacks = StackMode::kSampled;
  zero_sampling.stack_sample_every = 0;
  Tracker other(zero_sampling);
  EXPECT_THROW(other.start(), std::invalid_argument);
  EXPECT_FALSE(trackingActive());
}

// Sets an environment variable for the test's scope and restores what was there.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(TrackerOptions, ReadsTheEnvironmentAndRejectsNonsense) {
  {
    ScopedEnvironment stacks("MEMSEAL_STACKS", "sample:16");
    TrackerOptions options = TrackerOptions::fromEnvironment();
    EXPECT_EQ(options.stacks, StackMode::kSampled);
    EXPECT_EQ(options.stack_sample_every, 16u);
    EXPECT_FALSE(options.watch_ops.has_value());  // only what the environment sets
  }
  for (const char* nonsense : {"sometimes", "sample:0", "sample:", "On"}) {
    ScopedEnvironment stacks("MEMSEAL_STACKS", nonsense);
    try {
      TrackerOptions::fromEnvironment();
      ADD_FAILURE() << nonsense;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("MEMSEAL_STACKS="), std::string::npos);
      EXPECT_NE(std::string(error.what()).find("off, on, python or sample:N"), std::string::npos);
    }
  }
  {
    ScopedEnvironment ops("MEMSEAL_WATCH_OPS", "every:8");
    EXPECT_EQ(TrackerOptions::fromEnvironment().watch_ops, OpWatching::oneStepIn(8));
  }
  {
    ScopedEnvironment ops("MEMSEAL_WATCH_OPS", "off");
    EXPECT_EQ(TrackerOptions::fromEnvironment().watch_ops, OpWatching::off());
  }
  {
    ScopedEnvironment ops("MEMSEAL_WATCH_OPS", "auto");
    EXPECT_EQ(TrackerOptions::fromEnvironment().watch_ops, OpWatching::automatic());
  }
  for (const char* nonsense : {"every:0", "every:", "every:-3", "every:4x", "sometimes"}) {
    ScopedEnvironment ops("MEMSEAL_WATCH_OPS", nonsense);
    EXPECT_THROW(TrackerOptions::fromEnvironment(), std::invalid_argument) << nonsense;
  }
  {
    ScopedEnvironment metadata("MEMSEAL_TENSOR_METADATA", "0");
    EXPECT_EQ(TrackerOptions::fromEnvironment().record_tensor_metadata, false);
  }
}

// One grammar: what the environment accepts, set() accepts, and the reverse; text() writes it back.
TEST(TrackerOptions, SetSharesTheGrammarOfTheEnvironment) {
  for (const char* value : {"all", "off", "every:3", "auto"}) {
    TrackerOptions from_set;
    from_set.set("watch_ops", value);
    ScopedEnvironment ops("MEMSEAL_WATCH_OPS", value);
    EXPECT_EQ(from_set.watch_ops, TrackerOptions::fromEnvironment().watch_ops) << value;
    EXPECT_EQ(from_set.watch_ops->text(), value);
  }
  TrackerOptions options;
  options.set("watch-ops", "every:2");  // the CLI's spelling of the name
  EXPECT_EQ(options.watch_ops, OpWatching::oneStepIn(2));
  options.set("stacks", "sample:5");
  EXPECT_EQ(options.stacks, StackMode::kSampled);
  EXPECT_EQ(options.stack_sample_every, 5u);
  options.set("tensor_metadata", "off");
  EXPECT_EQ(options.record_tensor_metadata, false);
  EXPECT_THROW(options.set("watch_ops", "every:0"), std::invalid_argument);
  EXPECT_THROW(options.set("stacks", "sometimes"), std::invalid_argument);
  EXPECT_THROW(options.set("colour", "on"), std::invalid_argument);
  options.set("stacks", "python");
  EXPECT_EQ(options.stacks, StackMode::kPython);
  EXPECT_EQ(TrackerOptions::expectedValues("stacks"), "off, on, python or sample:N");
}

// Explicit settings win over the environment, the environment over the entry point's defaults.
TEST(TrackerOptions, ResolvedTakesCodeThenEnvironmentThenDefaults) {
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOn;
  defaults.watch_ops = OpWatching::automatic();
  {
    TrackerOptions resolved = TrackerOptions{}.resolved(defaults);
    EXPECT_EQ(resolved.stacks, StackMode::kOn);
    EXPECT_EQ(resolved.watch_ops, OpWatching::automatic());
    EXPECT_EQ(resolved.record_tensor_metadata, true);
    EXPECT_EQ(resolved.stack_sample_every, 64u);
  }
  ScopedEnvironment stacks("MEMSEAL_STACKS", "sample:8");
  ScopedEnvironment ops("MEMSEAL_WATCH_OPS", "all");
  TrackerOptions from_environment = TrackerOptions{}.resolved(defaults);
  EXPECT_EQ(from_environment.stacks, StackMode::kSampled);
  EXPECT_EQ(from_environment.stack_sample_every, 8u);
  EXPECT_EQ(from_environment.watch_ops, OpWatching::everyStep());
  TrackerOptions in_code;
  in_code.stacks = StackMode::kOff;
  TrackerOptions resolved = in_code.resolved(defaults);
  EXPECT_EQ(resolved.stacks, StackMode::kOff);
  EXPECT_EQ(resolved.watch_ops, OpWatching::everyStep());  // still from the environment
}

// The option's former name, observe_ops, in every spelling: still taken, as watch_ops; the new
// name wins where both are given.
TEST(TrackerOptions, TheFormerNameOfWatchOpsIsStillTaken) {
  TrackerOptions options;
  options.set("observe_ops", "every:3");
  EXPECT_EQ(options.watch_ops, OpWatching::oneStepIn(3));
  options.set("observe-ops", "off");
  EXPECT_EQ(options.watch_ops, OpWatching::off());
  EXPECT_EQ(TrackerOptions::environmentVariable("observe_ops"), "MEMSEAL_WATCH_OPS");
  {
    ScopedEnvironment former("MEMSEAL_OBSERVE_OPS", "every:6");
    EXPECT_EQ(TrackerOptions::fromEnvironment().watch_ops, OpWatching::oneStepIn(6));
    ScopedEnvironment current("MEMSEAL_WATCH_OPS", "all");
    EXPECT_EQ(TrackerOptions::fromEnvironment().watch_ops, OpWatching::everyStep());
  }
  {
    ScopedEnvironment former("MEMSEAL_OBSERVE_OPS", "sometimes");
    try {
      TrackerOptions::fromEnvironment();
      ADD_FAILURE() << "MEMSEAL_OBSERVE_OPS=sometimes was taken";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("MEMSEAL_OBSERVE_OPS=sometimes"), std::string::npos)
          << error.what();
    }
  }
  TrackerOptions in_code;
  in_code.observe_ops = OpWatching::off();
  EXPECT_EQ(in_code.resolved().watch_ops, OpWatching::off());
  in_code.watch_ops = OpWatching::automatic();
  EXPECT_EQ(in_code.resolved().watch_ops, OpWatching::automatic());
}

TEST(TrackerOptions, TheEnvironmentReachesEveryEntryPoint) {
  ScopedEnvironment stacks("MEMSEAL_STACKS", "off");
  {
    Tracker tracker(TrackerOptions{StackMode::kOn});  // code wins
    tracker.start();
    torch::Tensor kept = allocateFromANamedFunction();
    Snapshot snapshot = tracker.snapshot();
    const SiteSnapshot* site = findSite(snapshot, "aten::ones");
    ASSERT_NE(site, nullptr);
    EXPECT_FALSE(site->site.frames.empty());
  }
  {
    DetectorOptions options;
    options.on_leak = ReportPolicy::kNone;
    options.steps = 12;
    options.warmup = 2;
    std::vector<torch::Tensor> kept;
    LeakReport report = check([&](int) { kept.push_back(allocateFromANamedFunction()); }, options);
    ASSERT_TRUE(report.leak);
    EXPECT_TRUE(report.findings.front().site.frames.empty()) << report.toText();
  }
  ScopedEnvironment nonsense("MEMSEAL_WATCH_OPS", "sometimes");
  EXPECT_THROW(LeakDetector detector, std::invalid_argument);
  Tracker tracker;
  EXPECT_THROW(tracker.start(), std::invalid_argument);
  EXPECT_FALSE(trackingActive());
}

}  // namespace
}  // namespace memseal
