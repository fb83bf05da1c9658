// One process, one configuration: median ms per inference of a model with the normal allocator
// (whatever LD_PRELOAD put there: glibc, tcmalloc, jemalloc), with the memseal planned arena, or
// with the reference the planned-arena issue measured against: a trivial exact-size caching CPU
// allocator that keeps every block it ever handed out, by size.
// run_arena_bench.sh interleaves processes of every configuration and prints the ratios.
// Prints one line: key=value pairs.
#include <sys/resource.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "interleaved.h"
#include "memseal/arena.h"
#include "memseal/tracker.h"
#include "models/example_models.h"

using namespace memseal;

namespace {

// The exact-size cache (single-threaded, as the benchmark is). Each block carries its size in a
// 64-byte header, so the deleter needs no context and raw_deallocate works.
constexpr std::size_t kHeader = 64;
std::unordered_map<std::size_t, std::vector<void*>> g_cached_blocks;
std::int64_t g_cache_system_calls = 0;

void returnToCache(void* data) {
  if (data == nullptr) return;
  std::size_t bytes = *reinterpret_cast<std::size_t*>(static_cast<char*>(data) - kHeader);
  g_cached_blocks[bytes].push_back(data);
}

class ExactSizeCachingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    c10::Device cpu(c10::DeviceType::CPU);
    if (bytes == 0) return {nullptr, nullptr, &returnToCache, cpu};
    std::vector<void*>& cached = g_cached_blocks[bytes];
    void* data = nullptr;
    if (!cached.empty()) {
      data = cached.back();
      cached.pop_back();
    } else {
      ++g_cache_system_calls;
      std::size_t size = (bytes + kHeader + 63) / 64 * 64;
      char* base = static_cast<char*>(std::aligned_alloc(64, size));
      if (base == nullptr) throw std::bad_alloc();
      *reinterpret_cast<std::size_t*>(base) = bytes;
      data = base + kHeader;
    }
    return {data, data, &returnToCache, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &returnToCache; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "conv";
  std::string mode = "plain";
  int iterations = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--mode"))
      mode = argv[i + 1];
    else if (!std::strcmp(argv[i], "--iterations"))
      iterations = std::atoi(argv[i + 1]);
  }
  if ((model_name != "conv" && model_name != "transformer" && model_name != "mlp") ||
      (mode != "plain" && mode != "arena" && mode != "arena-small-pages" && mode != "cache") ||
      iterations < 1) {
    std::fprintf(
        stderr,
        "usage: %s --model conv|transformer|mlp --mode plain|arena|arena-small-pages|cache "
        "[--iterations N]\n",
        argv[0]);
    return 2;
  }
  static ExactSizeCachingAllocator cache;  // installed for good: the process ends with the run
  if (mode == "cache") c10::SetCPUAllocator(&cache, UINT8_MAX);
  // One intra-op thread as in the core issue's benchmark (a) unless MEMSEAL_BENCH_THREADS says:
  // the share of time that allocation costs grows with the threads that share the compute.
  const char* threads = std::getenv("MEMSEAL_BENCH_THREADS");
  at::set_num_threads(threads != nullptr && std::atoi(threads) > 0 ? std::atoi(threads) : 1);
  torch::manual_seed(0);
  c10::InferenceMode inference;
  examples::ConvNet conv;
  auto encoder = examples::makeEncoderLayer();
  auto mlp = examples::makeMlp();
  encoder->eval();
  torch::Tensor input;
  std::function<torch::Tensor()> forward;
  if (model_name == "conv") {
    input = torch::randn({8, 3, 64, 64});
    forward = [&] { return conv->forward(input); };
  } else if (model_name == "transformer") {
    input = torch::randn({128, 8, 256});  // sequence 128, batch 8, d_model 256
    forward = [&] { return encoder->forward(input); };
  } else {
    input = torch::randn({32, 64});
    forward = [&] { return mlp->forward(input); };
  }
  torch::Tensor output = forward().clone();  // results are copied into a tensor made once
  // Only the arena modes install memseal's allocator hook: the baselines run on the bare allocator.
  std::optional<PlannedArena> arena;
  if (mode == "arena" || mode == "arena-small-pages") {
    ArenaOptions arena_options;
    arena_options.huge_pages = mode != "arena-small-pages";
    arena.emplace(arena_options);
  }
  std::string key = PlannedArena::keyFor({input});
  auto inferOnce = [&] {
    if (arena) {
      arena->run(key, [&] { output.copy_(forward()); });
    } else {
      output.copy_(forward());
    }
  };
  for (int i = 0; i < 3; ++i) inferOnce();  // warm-up (and the arena's recording)
  std::vector<double> times;
  times.reserve(iterations);  // the harness itself allocates nothing between timed inferences
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    inferOnce();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::int64_t calls = 0;
  if (mode == "cache") {
    // Every allocation reaches the cache; what counts is what reaches the system allocator.
    std::int64_t before = g_cache_system_calls;
    inferOnce();
    calls = g_cache_system_calls - before;
  } else {
    // A tracker counts what reaches the system allocator from every thread, intra-op workers
    // included (memory served from an arena block is not tracked).
    TrackerOptions counting;
    counting.watch_ops = OpWatching::off();
    counting.record_tensor_metadata = false;
    Tracker counter(counting);
    counter.start();
    std::int64_t before = counter.stats().allocations_total;
    inferOnce();
    calls = counter.stats().allocations_total - before;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::size_t block = 0, lower = 0, held = 0;
  std::int64_t fallbacks = 0;
  if (arena) {
    if (auto plan = arena->plan(key)) {
      block = plan->block_bytes;
      lower = plan->lower_bound;
    }
    held = arena->stats().reserved_bytes;
    fallbacks = arena->stats().fallback_allocations;
  }
  // Memory kept for reuse between inferences: the arena's blocks, or every block in the cache.
  for (const auto& [bytes, blocks] : g_cached_blocks) held += bytes * blocks.size();
  std::printf(
      "model=%s mode=%s median_ms=%.4f peak_rss_kib=%ld allocator_calls=%lld block_bytes=%zu "
      "lower_bound=%zu held_bytes=%zu fallbacks=%lld\n",
      model_name.c_str(), mode.c_str(), bench::medianOf(times), usage.ru_maxrss,
      static_cast<long long>(calls), block, lower, held, static_cast<long long>(fallbacks));
  return 0;
}
