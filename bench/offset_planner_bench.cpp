// The offset planner on random recordings (Google Benchmark): planning time, and the planned block
// over the lower bound as a counter. Usage: memseal_bench_planner [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "plan/offset_planner.h"

namespace {

// A recording with `count` allocations and at most `max_live` alive at once: each allocation is
// freed a random number of events later, sizes span 64 B to 1 MiB.
std::vector<memseal::plan::PlannedAllocation> randomRecording(std::size_t count,
                                                              std::size_t max_live) {
  std::mt19937_64 random(count * 131 + max_live);
  std::vector<memseal::plan::PlannedAllocation> allocations;
  std::vector<std::size_t> live;
  std::uint32_t clock = 0;
  while (allocations.size() < count) {
    bool free_one = !live.empty() && (live.size() >= max_live || random() % 2 == 0);
    if (free_one) {
      std::size_t pick = random() % live.size();
      allocations[live[pick]].last_use = clock++;
      live[pick] = live.back();
      live.pop_back();
    } else {
      std::size_t size = std::size_t{64} << (random() % 15);
      allocations.push_back({size + random() % size, clock, clock});
      ++clock;
      live.push_back(allocations.size() - 1);
    }
  }
  for (std::size_t index : live) allocations[index].last_use = clock++;
  return allocations;
}

void planRandomRecording(benchmark::State& state) {
  auto allocations = randomRecording(static_cast<std::size_t>(state.range(0)),
                                     static_cast<std::size_t>(state.range(1)));
  memseal::plan::OffsetPlan plan;
  for (auto _ : state) {
    plan = memseal::plan::planOffsets(allocations);
    benchmark::DoNotOptimize(plan.block_size);
  }
  state.counters["block_over_lower_bound"] =
      static_cast<double>(plan.block_size) / static_cast<double>(plan.lower_bound);
}
BENCHMARK(planRandomRecording)
    ->Args({2000, 32})
    ->Args({2000, 200})
    ->Args({20000, 32})
    ->Args({20000, 200})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
