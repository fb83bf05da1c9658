// The planned arena on real libtorch inference: identical outputs, steady state served from the
// block, mismatches and escaping tensors handled safely, concurrent sessions, eviction, and a
// randomized test of the invariant that served memory never overlaps memory still in use.
#include <c10/core/CPUAllocator.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <thread>

#include "integration/tensor_overlap.h"
#include "memseal/arena.h"
#include "memseal/gtest.h"
#include "models/example_models.h"

// Heap allocations through operator new on this thread, to show that a replay's own machinery
// allocates nothing (the CPU allocator's calls are counted by NoAllocationScope instead). Delete is
// replaced too, so that AddressSanitizer sees malloc matched by free.
thread_local std::int64_t t_operator_new_calls = 0;

void* operator new(std::size_t bytes) {
  ++t_operator_new_calls;
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}
// GCC takes free() in an operator delete for a mismatch; here new is malloc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
#pragma GCC diagnostic pop
// The nothrow forms too (std::stable_sort's buffer), or ASan's own would pair with the free above.
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  ++t_operator_new_calls;
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void operator delete(void* memory, const std::nothrow_t&) noexcept { std::free(memory); }

namespace memseal {
namespace {

ArenaOptions quietArena() {
  ArenaOptions options;
  options.warn_on_mismatch = false;
  return options;
}

using examples::ConvNet;

TEST(PlannedArena, ConvNetOutputsMatchAndReplaysComeFromTheBlock) {
  torch::manual_seed(0);
  ConvNet model;
  c10::InferenceMode inference;
  torch::Tensor input = torch::randn({2, 3, 32, 32});
  torch::Tensor expected = model->forward(input);
  PlannedArena arena(quietArena());
  std::string key = PlannedArena::keyFor({input});
  EXPECT_EQ(key, "Float[2,3,32,32]");
  for (int run = 0; run < 5; ++run) {
    torch::Tensor output;
    arena.run(key, [&] { output = model->forward(input); });
    EXPECT_TRUE(torch::equal(output, expected)) << "run " << run;
  }
  ArenaStats stats = arena.stats();
  EXPECT_EQ(stats.recordings, 1);
  EXPECT_EQ(stats.replays, 4);
  EXPECT_EQ(stats.fallback_allocations, 0);
  EXPECT_EQ(stats.mismatched_runs, 0);
  EXPECT_GT(stats.served_allocations, 4 * 5);
  EXPECT_EQ(stats.output_allocations, 4);  // one output per replay, from the normal allocator
  std::optional<ArenaPlanSummary> plan = arena.plan(key);
  ASSERT_TRUE(plan.has_value());
  EXPECT_GE(plan->block_bytes, plan->lower_bound);
  EXPECT_LE(plan->block_bytes, plan->naive_sum);
  EXPECT_LT(plan->block_bytes, plan->naive_sum);  // reuse happened
  EXPECT_EQ(plan->escaping_allocations, 1u);

  // Copying into a tensor made outside the region makes the replay allocation-free.
  torch::Tensor result = torch::empty_like(expected);
  std::string copy_key = key + "/copy";
  arena.run(copy_key, [&] { result.copy_(model->forward(input)); });
  EXPECT_NO_ALLOCATION(arena.run(copy_key, [&] { result.copy_(model->forward(input)); }));
  EXPECT_TRUE(torch::equal(result, expected));
}

TEST(PlannedArena, KeyFromTheInputsAndTheReplayItselfAllocateNothing) {
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  torch::Tensor batch = torch::ones({8, 3, 16, 16});
  torch::Tensor transposed = torch::ones({4, 5}).t();
  torch::Tensor output = torch::empty_like(batch);
  std::int64_t runs = 0, more = 0;
  // Captures more than std::function keeps inline: a region stored in one would allocate per run.
  auto region = [&] {
    output.copy_(batch * 2);
    runs += 1 + more;
  };
  auto newCallsOf = [](auto&& work) {
    std::int64_t before = t_operator_new_calls;
    work();
    return t_operator_new_calls - before;
  };
  for (int i = 0; i < 3; ++i) arena.run({batch, transposed}, region);  // records, then replays
  // libtorch's own objects (TensorImpl, StorageImpl) come from operator new either way; a replay
  // adds nothing to them, key included.
  std::int64_t outside = newCallsOf(region);
  ASSERT_GT(outside, 0);  // the counter sees libtorch's allocations
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(newCallsOf([&] { arena.run({batch, transposed}, region); }), outside) << "run " << i;
  }
  EXPECT_EQ(runs, 9);
  std::string key = PlannedArena::keyFor({batch, transposed});
  EXPECT_EQ(key, "Float[8,3,16,16]|Float[5,4]s");
  ASSERT_TRUE(arena.plan(key).has_value());  // the runs above were under this key
  ArenaStats stats = arena.stats();
  EXPECT_EQ(stats.recordings, 1);
  EXPECT_EQ(stats.replays, 7);
  EXPECT_EQ(stats.fallback_allocations, 0);
  EXPECT_GT(stats.served_allocations, 0);
  EXPECT_EQ(PlannedArena::keyFor({torch::Tensor(), torch::zeros({0}, torch::kInt64)}),
            "undefined|Long[0]");
}

TEST(PlannedArena, TheRecordingMakesTheFirstBlockSoTheFirstReplayAllocatesNothing) {
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  torch::Tensor batch = torch::ones({64, 256});
  torch::Tensor output = torch::empty({64, 256});
  auto region = [&] { output.copy_((batch * 2).relu() + 1); };
  arena.run({batch}, region);  // records
  std::string key = PlannedArena::keyFor({batch});
  ASSERT_TRUE(arena.plan(key).has_value());
  // The block is there (its pages faulted in) before any replay asked for it.
  EXPECT_EQ(arena.stats().reserved_bytes, arena.plan(key)->block_bytes);
  NoAllocationScope no_allocation;
  std::int64_t operator_new_before = t_operator_new_calls;
  arena.run({batch}, region);  // the first replay
  std::int64_t replay_new_calls = t_operator_new_calls - operator_new_before;
  EXPECT_EQ(no_allocation.allocations(), 0);
  operator_new_before = t_operator_new_calls;
  arena.run({batch}, region);
  EXPECT_EQ(t_operator_new_calls - operator_new_before, replay_new_calls);  // no Block made
  EXPECT_EQ(arena.stats().replays, 2);
  EXPECT_EQ(arena.stats().reserved_bytes, arena.plan(key)->block_bytes);
}

TEST(PlannedArena, AnotherShapeUnderTheSameKeyFallsBackAndSaysWhy) {
  torch::manual_seed(0);
  ConvNet model;
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  torch::Tensor small = torch::randn({1, 3, 16, 16});
  torch::Tensor large = torch::randn({2, 3, 16, 16});
  torch::Tensor output;
  arena.run("fixed key", [&] { output = model->forward(small); });
  arena.run("fixed key", [&] { output = model->forward(large); });
  EXPECT_TRUE(torch::allclose(output, model->forward(large)));
  ArenaStats stats = arena.stats();
  EXPECT_GT(stats.fallback_allocations, 0);
  EXPECT_EQ(stats.mismatched_runs, 1);
  ASSERT_FALSE(arena.mismatches().empty());
  EXPECT_NE(arena.mismatches().back().find("asked for"), std::string::npos)
      << arena.mismatches().back();
}

TEST(PlannedArena, FewerOrMoreAllocationsThanRecordedAreCountedAndSaid) {
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  torch::Tensor input = torch::arange(256, torch::kFloat);
  torch::Tensor output = torch::empty({256});
  int extra_ops = 1;
  auto region = [&] {
    torch::Tensor t = input.exp();
    for (int i = 0; i < extra_ops; ++i) t = t.sqrt();
    output.copy_(t);
  };
  arena.run("k", region);  // records exp and one sqrt: two planned allocations
  ASSERT_EQ(arena.plan("k")->planned_allocations, 2u);
  extra_ops = 0;
  arena.run("k", region);
  EXPECT_TRUE(torch::equal(output, input.exp()));
  ASSERT_EQ(arena.mismatches().size(), 1u);
  EXPECT_NE(arena.mismatches().back().find("the run made 1 allocations; the recording made 2"),
            std::string::npos)
      << arena.mismatches().back();
  extra_ops = 3;
  arena.run("k", region);
  EXPECT_TRUE(torch::allclose(output, input.exp().sqrt().sqrt().sqrt()));
  ASSERT_EQ(arena.mismatches().size(), 2u);
  EXPECT_NE(arena.mismatches().back().find("is beyond the 2 allocations recorded"),
            std::string::npos)
      << arena.mismatches().back();
  ArenaStats stats = arena.stats();
  EXPECT_EQ(stats.mismatched_runs, 2);
  EXPECT_EQ(stats.fallback_allocations, 1 + 2);  // the missing one, then the two beyond the plan
  EXPECT_EQ(stats.served_allocations, 1 + 2);
  EXPECT_EQ(stats.retired_blocks, 0);  // mismatched runs still give their block back
  EXPECT_EQ(stats.reserved_bytes, arena.plan("k")->block_bytes);
}

TEST(PlannedArena, ATensorPlannedToDieThatEscapesRetiresItsBlock) {
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  torch::Tensor input = torch::arange(1000, torch::kFloat);
  torch::Tensor escaped;
  bool keep_intermediate = false;
  auto region = [&] {
    torch::Tensor intermediate = input * 2;  // planned: freed inside the recording
    if (keep_intermediate) escaped = intermediate;
    torch::Tensor other = intermediate + 1;
  };
  arena.run("k", region);
  keep_intermediate = true;
  arena.run("k", region);
  keep_intermediate = false;
  torch::Tensor snapshot = escaped.clone();
  for (int i = 0; i < 3; ++i) arena.run("k", region);  // must not reuse the escaped tensor's bytes
  EXPECT_TRUE(torch::equal(escaped, snapshot));
  EXPECT_EQ(arena.stats().retired_blocks, 1);
  ASSERT_FALSE(arena.mismatches().empty());
  EXPECT_NE(arena.mismatches().back().find("still alive"), std::string::npos);
  // The retired block's memory is reserved until the escaped tensor goes, then given back.
  std::size_t block_bytes = arena.plan("k")->block_bytes;
  ASSERT_GT(block_bytes, 0u);
  EXPECT_EQ(arena.stats().reserved_bytes, 2 * block_bytes);  // the retired block and its successor
  escaped = torch::Tensor();
  EXPECT_EQ(arena.stats().reserved_bytes, block_bytes);
}

TEST(PlannedArena, RetiredBlockOutlivingTheArenaIsFreedWithItsLastTensor) {
  c10::InferenceMode inference;
  torch::Tensor input = torch::arange(1000, torch::kFloat);
  torch::Tensor escaped;
  {
    PlannedArena arena(quietArena());
    bool keep_intermediate = false;
    auto region = [&] {
      torch::Tensor intermediate = input * 2;
      if (keep_intermediate) escaped = intermediate;
      torch::Tensor other = intermediate + 1;
    };
    arena.run("k", region);
    keep_intermediate = true;
    arena.run("k", region);
  }
  // The arena is gone; the tensor still reads its data, and freeing it deletes the block (ASan
  // reports a leak or a use after free if not).
  EXPECT_TRUE(torch::equal(escaped, input * 2));
  escaped = torch::Tensor();
}

// Served memory comes back to its block by address wherever it is freed: inside the region on
// its own thread, on another thread, through raw_deallocate (as oneDNN frees its buffers).
TEST(PlannedArena, ServedMemoryFreedOnAnotherThreadOrRawGoesBackToItsBlock) {
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  torch::Tensor input = torch::arange(1000, torch::kFloat);
  torch::Tensor escaped;
  bool keep_intermediate = false;
  void* raw_seen = nullptr;
  auto region = [&] {
    c10::Allocator* allocator = c10::GetCPUAllocator();
    void* raw = allocator->raw_allocate(4096);
    raw_seen = raw;
    std::memset(raw, 1, 4096);
    torch::Tensor intermediate = input * 2;
    if (keep_intermediate) escaped = intermediate;
    torch::Tensor other = intermediate + 1;
    allocator->raw_deallocate(raw);
  };
  arena.run("k", region);
  arena.run("k", region);
  void* first_raw = raw_seen;
  arena.run("k", region);
  EXPECT_EQ(raw_seen, first_raw);  // the same planned bytes, each replay
  EXPECT_EQ(arena.stats().fallback_allocations, 0);
  std::int64_t served = arena.stats().served_allocations;
  std::int64_t per_replay = served / 2;
  EXPECT_EQ(served, 2 * per_replay);
  EXPECT_GE(per_replay, 3);  // at least the raw buffer, intermediate and other

  keep_intermediate = true;
  arena.run("k", region);  // the served intermediate outlives the region: its block is retired
  keep_intermediate = false;
  std::size_t reserved_with_retired = arena.stats().reserved_bytes;
  std::thread([moved = std::move(escaped)]() mutable { moved = torch::Tensor(); }).join();
  EXPECT_FALSE(escaped.defined());
  EXPECT_LT(arena.stats().reserved_bytes, reserved_with_retired);  // freed there: block deleted
  arena.run("k", region);
  EXPECT_EQ(arena.stats().fallback_allocations, 0);
  EXPECT_EQ(arena.stats().served_allocations, served + 2 * per_replay);
}

// Blocks of 2 MiB or more are whole huge pages when asked (the default), exactly the plan when not.
TEST(PlannedArena, LargeBlocksAreWholeHugePagesUnlessTurnedOff) {
  c10::InferenceMode inference;
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  torch::Tensor input = torch::ones({700 * 1024});  // 2.7 MiB of floats
  auto region = [&] { torch::Tensor t = (input * 2).sum(); };
  for (bool huge_pages : {true, false}) {
    ArenaOptions options = quietArena();
    options.huge_pages = huge_pages;
    PlannedArena arena(options);
    arena.run("k", region);
    arena.run("k", region);
    std::size_t block_bytes = arena.plan("k")->block_bytes;
    ASSERT_GE(block_bytes, kHugePage);
    std::size_t reserved = arena.stats().reserved_bytes;
    if (huge_pages) {
      EXPECT_EQ(reserved % kHugePage, 0u);
      EXPECT_GE(reserved, block_bytes);
      EXPECT_LT(reserved, block_bytes + kHugePage);
    } else {
      EXPECT_EQ(reserved, block_bytes);
    }
  }
}

TEST(PlannedArena, ConcurrentSessionsEachGetTheirOwnBlock) {
  torch::manual_seed(0);
  ConvNet model;
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  constexpr int kThreads = 4;
  std::vector<torch::Tensor> inputs;
  std::vector<torch::Tensor> expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(torch::randn({1, 3, 16, 16}));
    expected.push_back(model->forward(inputs.back()));
  }
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      c10::InferenceMode thread_inference;
      for (int run = 0; run < 10; ++run) {
        torch::Tensor output;
        arena.run("shared key", [&] { output = model->forward(inputs[t]); });
        if (!torch::equal(output, expected[t])) ++wrong[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_EQ(arena.stats().fallback_allocations, 0);
}

TEST(PlannedArena, LeastRecentlyUsedPlansAreEvictedUnderTheCap) {
  c10::InferenceMode inference;
  ArenaOptions options = quietArena();
  options.max_bytes = 3 * 4096 * 4 + 1024;  // room for about three of the plans below
  PlannedArena arena(options);
  auto region_for = [](std::int64_t n) { return [n] { torch::Tensor t = torch::ones({n}) * 2; }; };
  for (int round = 0; round < 2; ++round) {
    for (std::int64_t n : {4000, 4001, 4002, 4003, 4004})
      arena.run("n" + std::to_string(n), region_for(n));
  }
  ArenaStats stats = arena.stats();
  EXPECT_GT(stats.evicted_plans, 0);
  EXPECT_LE(stats.reserved_bytes, options.max_bytes);
}

TEST(PlannedArena, ExceptionsAndNestingAreHandled) {
  c10::InferenceMode inference;
  PlannedArena arena(quietArena());
  auto region = [] { torch::Tensor t = torch::ones({100}) + 1; };
  arena.run("k", region);
  EXPECT_THROW(arena.run("k",
                         [] {
                           torch::Tensor t = torch::ones({100}) + 1;
                           throw std::runtime_error("inside");
                         }),
               std::runtime_error);
  // The block of the run that threw is retired, and given back once its tensors are gone (they
  // were, in the unwinding); the next run takes a new one.
  EXPECT_EQ(arena.stats().retired_blocks, 1);
  EXPECT_NO_THROW(arena.run("k", region));
  EXPECT_EQ(arena.stats().reserved_bytes, arena.plan("k")->block_bytes);
  torch::Tensor input = torch::ones({3});
  EXPECT_THROW(arena.run("outer", [&] { arena.run("inner", region); }), std::logic_error);
  EXPECT_THROW(arena.run("k", [&] { arena.run({input}, region); }), std::logic_error);  // replay
  EXPECT_THROW(arena.run({input}, [&] { arena.run({input}, region); }), std::logic_error);
  EXPECT_THROW(arena.run("k", nullptr), std::invalid_argument);

  // Without a plan that fits, the run uses the normal allocator: regions do not nest there either.
  ArenaOptions tiny = quietArena();
  tiny.max_bytes = 64;
  PlannedArena small_arena(tiny);
  auto big = [] { torch::Tensor t = torch::ones({4096}) + 1; };
  small_arena.run("big", big);  // records: the plan is over max_bytes
  EXPECT_NO_THROW(small_arena.run("big", big));
  EXPECT_EQ(small_arena.stats().unplanned_runs, 1);
  EXPECT_THROW(small_arena.run("big", [&] { small_arena.run("inner", big); }), std::logic_error);
}

// Random allocation programs: recorded once, replayed with frees delayed, tensors kept and sizes
// changed. Every allocation served during a replay must not overlap any tensor still alive.
TEST(PlannedArena, ServedMemoryNeverOverlapsLiveMemoryUnderRandomPrograms) {
  std::mt19937_64 random(7);
  PlannedArena arena(quietArena());
  int checks = 0;
  for (int program = 0; program < 150; ++program) {
    int count = 4 + static_cast<int>(random() % 40);
    std::vector<std::int64_t> sizes(count);
    std::vector<int> free_after(count);  // the op index after which tensor i is freed (-1: output)
    for (int i = 0; i < count; ++i) {
      sizes[i] = 1 + static_cast<std::int64_t>(random() % 5000);
      free_after[i] = random() % 8 == 0 ? -1 : i + static_cast<int>(random() % 6);
    }
    std::string key = "program " + std::to_string(program);
    for (int replay = 0; replay < 4; ++replay) {
      bool perturb = replay >= 2;
      std::vector<torch::Tensor> live(count);
      std::vector<torch::Tensor> outputs;
      arena.run(key, [&] {
        for (int i = 0; i < count; ++i) {
          std::int64_t size = sizes[i] + (perturb && random() % 10 == 0 ? 64 : 0);
          live[i] = torch::empty({size}, torch::kByte);
          EXPECT_FALSE(test::overlapsAny(live[i], live, i) || test::overlapsAny(live[i], outputs))
              << key << " replay " << replay << " alloc " << i;
          ++checks;
          for (int j = 0; j <= i; ++j) {
            bool delay = perturb && random() % 4 == 0;
            if (live[j].defined() && free_after[j] >= 0 && free_after[j] <= i && !delay) {
              live[j] = torch::Tensor();
            }
          }
        }
        for (int i = 0; i < count; ++i) {
          if (live[i].defined() && (free_after[i] < 0 || (perturb && random() % 3 == 0))) {
            outputs.push_back(live[i]);
          }
          live[i] = torch::Tensor();
        }
      });
    }
  }
  EXPECT_GT(checks, 5000);
  EXPECT_GT(arena.stats().served_allocations, 0);
}

// A TorchScript model saved by the venv's Python at test time, run in C++ with and without the
// arena: identical outputs.
TEST(PlannedArena, TorchScriptModelFromPythonGivesIdenticalOutputs) {
#ifndef MEMSEAL_TEST_PYTHON
  GTEST_SKIP() << "built with Torch_DIR and no Python: cannot make the TorchScript model";
#else
  std::string path = ::testing::TempDir() + "memseal_arena_model.pt";
  std::string command = std::string("'") + MEMSEAL_TEST_PYTHON + "' '" + MEMSEAL_TEST_SCRIPTS +
                        "/make_torchscript_model.py' '" + path + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  torch::jit::Module module = torch::jit::load(path);
  module.eval();
  c10::InferenceMode inference;
  torch::Tensor input = torch::randn({4, 3, 32, 32});
  torch::Tensor expected = module.forward({input}).toTensor();
  PlannedArena arena(quietArena());
  for (int run = 0; run < 4; ++run) {
    torch::Tensor output;
    arena.run(PlannedArena::keyFor({input}), [&] { output = module.forward({input}).toTensor(); });
    EXPECT_TRUE(torch::equal(output, expected)) << "run " << run;
  }
  EXPECT_EQ(arena.stats().fallback_allocations, 0);
  EXPECT_GT(arena.stats().served_allocations, 0);
#endif
}

}  // namespace
}  // namespace memseal
