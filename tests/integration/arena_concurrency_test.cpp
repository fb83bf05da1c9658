// The planned arena with frees on other threads than the one running the block: during the run,
// racing the runner's own allocations, and after it (a retired block then dies on that thread).
// Also run under ThreadSanitizer: the block's counts are plain integers on the runner's side and
// atomics on everybody else's.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "memseal/arena.h"

namespace memseal {
namespace {

ArenaOptions exactArena() {
  ArenaOptions options;
  options.warn_on_mismatch = false;
  options.huge_pages = false;  // reserved bytes are then exactly the plan's block
  return options;
}

// Drops `tensor` on a new thread and waits for it: a free from another thread, inside the run.
void freeOnAnotherThread(torch::Tensor tensor) {
  std::thread([doomed = std::move(tensor)]() mutable { doomed = torch::Tensor(); }).join();
}

TEST(ArenaConcurrency, TensorsFreedOnAnotherThreadDuringTheRunKeepTheBlockReusable) {
  c10::InferenceMode inference;
  PlannedArena arena(exactArena());
  torch::Tensor input = torch::arange(4096, torch::kFloat);
  torch::Tensor output = torch::empty({4096});
  auto region = [&] {
    freeOnAnotherThread(input * 2);  // planned, and freed before the next allocation
    torch::Tensor kept = input + 1;  // may be planned into the bytes just freed
    freeOnAnotherThread(kept * 5);
    output.copy_(kept * 3);
  };
  constexpr int kRuns = 20;
  for (int run = 0; run < kRuns; ++run) {
    output.zero_();
    arena.run("k", region);
    ASSERT_TRUE(torch::equal(output, (input + 1) * 3)) << "run " << run;
  }
  ArenaStats stats = arena.stats();
  std::optional<ArenaPlanSummary> plan = arena.plan("k");
  ASSERT_TRUE(plan.has_value());
  // The four results above and the scalars libtorch wraps in tensors: all freed inside the run.
  EXPECT_GE(plan->planned_allocations, 4u);
  EXPECT_EQ(plan->escaping_allocations, 0u);
  EXPECT_EQ(stats.replays, kRuns - 1);
  EXPECT_EQ(stats.served_allocations,
            (kRuns - 1) * static_cast<std::int64_t>(plan->planned_allocations));
  EXPECT_EQ(stats.fallback_allocations, 0);
  EXPECT_EQ(stats.retired_blocks, 0);  // every run ended with nothing of the block alive
  EXPECT_EQ(stats.reserved_bytes, plan->block_bytes);  // one block, reused by every replay
}

TEST(ArenaConcurrency, RetiredBlockDiesWithItsLastTensorOnAnotherThread) {
  c10::InferenceMode inference;
  PlannedArena arena(exactArena());
  torch::Tensor input = torch::arange(4096, torch::kFloat);
  std::vector<torch::Tensor> escaped;
  bool keep = false;
  auto region = [&] {
    torch::Tensor first = input * 2;
    torch::Tensor second = first + 1;
    if (keep) {
      escaped.push_back(first);  // planned to die inside: the block is retired
      escaped.push_back(second);
    }
  };
  arena.run("k", region);
  arena.run("k", region);
  std::size_t block_bytes = arena.plan("k")->block_bytes;
  keep = true;
  arena.run("k", region);
  keep = false;
  arena.run("k", region);  // a new block: the retired one still holds two live tensors
  EXPECT_EQ(arena.stats().retired_blocks, 1);
  EXPECT_EQ(arena.stats().reserved_bytes, 2 * block_bytes);
  EXPECT_TRUE(torch::equal(escaped[1], input * 2 + 1));
  std::thread([&] { escaped.clear(); }).join();  // the last reference goes on that thread
  EXPECT_EQ(arena.stats().reserved_bytes, block_bytes);
}

TEST(ArenaConcurrency, RunnersRacingFreesOnOtherThreadsStayCorrect) {
  c10::InferenceMode inference;
  PlannedArena arena(exactArena());
  constexpr int kRunners = 3;
  constexpr int kRuns = 30;
  std::vector<torch::Tensor> inputs;
  for (int r = 0; r < kRunners; ++r) inputs.push_back(torch::full({2048}, float(r + 1)));
  // The free races the allocations after it: where the recording saw it done first, a replay that
  // gets there before it must fall back rather than share the bytes.
  auto infer = [&](int r, torch::Tensor& output) {
    arena.run("shared", [&] {
      torch::Tensor handed = inputs[r] * 2;
      std::thread freer([doomed = std::move(handed)]() mutable { doomed = torch::Tensor(); });
      torch::Tensor a = inputs[r] + 1;
      torch::Tensor b = a * 4;
      freer.join();
      output.copy_(b - a);
    });
  };
  torch::Tensor recorded = torch::empty({2048});
  infer(0, recorded);  // one recording, before the runners: they all replay its plan
  std::vector<int> wrong(kRunners, 0);
  std::vector<std::thread> runners;
  for (int r = 0; r < kRunners; ++r) {
    runners.emplace_back([&, r] {
      c10::InferenceMode runner_inference;
      torch::Tensor output = torch::empty({2048});
      for (int run = 0; run < kRuns; ++run) {
        infer(r, output);
        if (!torch::equal(output, (inputs[r] + 1) * 3)) ++wrong[r];
      }
    });
  }
  for (auto& runner : runners) runner.join();
  for (int r = 0; r < kRunners; ++r) EXPECT_EQ(wrong[r], 0) << "runner " << r;
  ArenaStats stats = arena.stats();
  std::optional<ArenaPlanSummary> plan = arena.plan("shared");
  ASSERT_TRUE(plan.has_value());
  // Every allocation of every replay was either served from a block or fell back, none lost.
  std::int64_t per_run = static_cast<std::int64_t>(plan->planned_allocations) +
                         static_cast<std::int64_t>(plan->escaping_allocations);
  EXPECT_EQ(stats.served_allocations + stats.fallback_allocations + stats.output_allocations,
            stats.replays * per_run);
  EXPECT_EQ(stats.recordings, 1);
  EXPECT_EQ(stats.replays, kRunners * kRuns);
  EXPECT_EQ(stats.retired_blocks, 0);
  EXPECT_LE(stats.reserved_bytes, kRunners * plan->block_bytes);  // at most a block per runner
}

}  // namespace
}  // namespace memseal
