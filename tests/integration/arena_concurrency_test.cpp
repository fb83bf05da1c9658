// The planned arena with frees on other threads than the one running the block: during the run,
// racing the runner's own allocations, and after it (a retired block then dies on that thread);
// and random programs run on several threads at once.
// Also run under ThreadSanitizer: the block's counts are plain integers on the runner's side and
// atomics on everybody else's.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "integration/tensor_overlap.h"
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

// Threads running random allocation programs on one arena at once, under shared keys (each run
// gets a block of its own), with frees delayed, tensors kept past the run, sizes changed and
// exceptions thrown partway: no memory served to a run overlaps a tensor of that run still alive,
// every byte keeps what its tensor wrote, and the arena still plans and serves afterwards.
TEST(ArenaConcurrency, RandomProgramsOnSeveralThreadsNeverShareLiveMemory) {
  c10::InferenceMode inference;
  PlannedArena arena(exactArena());
  constexpr int kThreads = 3;
  constexpr int kRunsPerThread = 120;
  constexpr int kPrograms = 6;
  std::vector<int> overlaps(kThreads, 0);
  std::vector<int> corrupted(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      c10::InferenceMode thread_inference;
      std::mt19937_64 random(100 + t);
      std::vector<torch::Tensor> kept;  // outputs kept past their run, checked at the end
      std::vector<std::uint8_t> kept_values;
      for (int run = 0; run < kRunsPerThread; ++run) {
        int program = static_cast<int>(random() % kPrograms);
        std::mt19937_64 shape_of_program(program);  // the same program every time it runs
        int count = 4 + static_cast<int>(shape_of_program() % 24);
        bool perturb = random() % 3 == 0;
        int throw_at = random() % 6 == 0 ? static_cast<int>(random() % count) : -1;
        std::vector<torch::Tensor> live(count);
        std::vector<std::uint8_t> values(count);
        try {
          arena.run("program " + std::to_string(program), [&] {
            for (int i = 0; i < count; ++i) {
              std::int64_t size = 1 + static_cast<std::int64_t>(shape_of_program() % 4000) +
                                  (perturb && random() % 8 == 0 ? 64 : 0);
              live[i] = torch::empty({size}, torch::kByte);
              values[i] = static_cast<std::uint8_t>(random());
              live[i].fill_(values[i]);
              if (test::overlapsAny(live[i], live, i)) ++overlaps[t];
              if (i == throw_at) throw std::runtime_error("the request failed");
              // Each tensor dies within a few allocations, some later when perturbed.
              int j = i - static_cast<int>(shape_of_program() % 4);
              if (j >= 0 && live[j].defined() && !(perturb && random() % 4 == 0)) {
                if (!torch::all(live[j] == values[j]).item<bool>()) ++corrupted[t];
                live[j] = torch::Tensor();
              }
            }
          });
        } catch (const std::runtime_error&) {
        }
        for (int i = 0; i < count; ++i) {
          if (!live[i].defined()) continue;
          if (!torch::all(live[i] == values[i]).item<bool>()) ++corrupted[t];
          if (random() % 5 == 0 && kept.size() < 64) {  // outlives its run and its block
            kept.push_back(live[i]);
            kept_values.push_back(values[i]);
          }
        }
      }
      for (std::size_t k = 0; k < kept.size(); ++k) {
        if (!torch::all(kept[k] == kept_values[k]).item<bool>()) ++corrupted[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(overlaps[t], 0) << "thread " << t;
    EXPECT_EQ(corrupted[t], 0) << "thread " << t;
  }
  ArenaStats stats = arena.stats();
  EXPECT_GT(stats.served_allocations, 0);
  EXPECT_GT(stats.replays, 0);
  // Still serving: one more run of a fresh program is recorded, then replayed from a block.
  auto region = [] { torch::Tensor t = torch::ones({1000}) + 1; };
  arena.run("after", region);
  std::int64_t served = arena.stats().served_allocations;
  arena.run("after", region);
  EXPECT_GT(arena.stats().served_allocations, served);
}

}  // namespace
}  // namespace memseal
