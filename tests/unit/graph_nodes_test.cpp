// The autograd-graph sampler's bounded memory: past its slots, older steps are thinned in place and
// the first and the newest steps stay sampled, so a graph kept from the first step is still seen.
#include "detect/graph_nodes.h"

#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <vector>

#include "memseal/tracker.h"

namespace memseal::detect {
namespace {

TEST(GraphNodeSampler, PastItsSlotsKeepsTheFirstStepAndEveryNewestOne) {
  GraphNodeSampler sampler(0);
  at::Tensor weight = at::ones({2}).requires_grad_();
  std::vector<at::Tensor> kept;  // every step's output with its graph, as a retained graph leaks
  constexpr std::uint32_t kSteps = 1500;
  for (std::uint32_t step = 0; step < kSteps; ++step) {
    setStep(step);
    at::Tensor output = weight.mul(2);
    sampler.onGradFn(track::TensorSignature{}, -1, output.grad_fn(), 1);
    kept.push_back(output);
  }
  setStep(kSteps);
  NodeEvidence evidence = sampler.evidence(0, kSteps - 1);
  setStep(0);
  const std::vector<std::uint32_t>& sampled = evidence.sampled_steps;
  ASSERT_FALSE(sampled.empty());
  EXPECT_LT(sampled.size(), kSteps / 2);  // thinned: bounded, whatever the run's length
  EXPECT_TRUE(std::is_sorted(sampled.begin(), sampled.end()));
  EXPECT_EQ(sampled.front(), 0u);
  // The newest 256 steps, every one of them.
  ASSERT_GE(sampled.size(), 256u);
  for (std::uint32_t back = 0; back < 256; ++back) {
    EXPECT_EQ(sampled[sampled.size() - 1 - back], kSteps - 1 - back);
  }
  EXPECT_EQ(evidence.alive_samples, static_cast<std::int64_t>(sampled.size()));
  ASSERT_EQ(evidence.groups_by_root_site.count(1), 1u);
  EXPECT_EQ(evidence.groups_by_root_site.at(1).count, static_cast<std::int64_t>(sampled.size()));
}

TEST(GraphNodeSampler, AStepWhoseGraphDiedHasNoAliveSamples) {
  GraphNodeSampler sampler(0);
  at::Tensor weight = at::ones({2}).requires_grad_();
  at::Tensor kept;
  for (std::uint32_t step = 0; step < 4; ++step) {
    setStep(step);
    at::Tensor output = weight.mul(2);
    sampler.onGradFn(track::TensorSignature{}, -1, output.grad_fn(), 1);
    if (step == 2) kept = output;  // only step 2's graph outlives its step
  }
  setStep(4);
  NodeEvidence evidence = sampler.evidence(0, 3);
  setStep(0);
  EXPECT_EQ(evidence.sampled_steps, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(evidence.alive_samples, 1);
  ASSERT_EQ(evidence.groups_by_root_site.count(1), 1u);
  EXPECT_EQ(evidence.groups_by_root_site.at(1).steps, (std::vector<std::uint32_t>{2}));
}

TEST(GraphNodeSampler, ARunningTotalLinksItsStepsWhateverComesAfterItInTheStep) {
  // `total = total + loss`, then many more nodes in the same step that die with it (a GAN's
  // generator update after the discriminator's kept error): the add is none of the step's newest
  // samples, and still names every step's kept graph.
  GraphNodeSampler sampler(0);
  at::Tensor weight = at::ones({2}).requires_grad_();
  at::Tensor total;
  constexpr std::uint32_t kSteps = 6;
  constexpr std::uint32_t kTotalSite = 7;
  for (std::uint32_t step = 0; step < kSteps; ++step) {
    setStep(step);
    at::Tensor loss = weight.mul(2).sum();
    sampler.onGradFn(track::TensorSignature{}, -1, loss.grad_fn(), 1);
    total = total.defined() ? total.add(loss) : loss.mul(1);
    sampler.onGradFn(track::TensorSignature{}, -1, total.grad_fn(), kTotalSite);
    std::vector<at::Tensor> step_only;  // alive until the step ends, as its graph is
    for (int later = 0; later < 40; ++later) {
      step_only.push_back(weight.mul(3));
      sampler.onGradFn(track::TensorSignature{}, -1, step_only.back().grad_fn(), 2);
    }
  }
  setStep(kSteps);
  NodeEvidence evidence = sampler.evidence(0, kSteps - 1);
  setStep(0);
  EXPECT_EQ(sampler.linkedSteps(), kSteps - 1);
  ASSERT_EQ(evidence.groups_by_root_site.count(kTotalSite), 1u);
  // Step 0's total links to nothing before it; every later one does.
  EXPECT_EQ(evidence.groups_by_root_site.at(kTotalSite).steps,
            (std::vector<std::uint32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(evidence.groups_by_root_site.size(), 1u);
}

}  // namespace
}  // namespace memseal::detect
