// One process, one configuration: median ms per inference of a model with the normal allocator
// (whatever LD_PRELOAD put there: glibc, tcmalloc, jemalloc) or with the memseal planned arena.
// run_arena_bench.sh interleaves processes of every configuration and prints the ratios.
// Prints one line: key=value pairs.
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "models/example_models.h"
#include "interleaved.h"
#include "memseal/arena.h"
#include "memseal/scope.h"

using namespace memseal;

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
      (mode != "plain" && mode != "arena") || iterations < 1) {
    std::fprintf(stderr,
                 "usage: %s --model conv|transformer|mlp --mode plain|arena [--iterations N]\n",
                 argv[0]);
    return 2;
  }
  at::set_num_threads(1);
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
  PlannedArena arena;
  std::string key = PlannedArena::keyFor({input});
  auto inferOnce = [&] {
    if (mode == "arena") {
      arena.run(key, [&] { output.copy_(forward()); });
    } else {
      output.copy_(forward());
    }
  };
  for (int i = 0; i < 3; ++i) inferOnce();  // warm-up (and the arena's recording)
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    inferOnce();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::int64_t calls = 0;
  {
    NoAllocationScope counter;
    inferOnce();
    calls = counter.allocations();
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::size_t block = 0, lower = 0;
  if (auto plan = arena.plan(key)) {
    block = plan->block_bytes;
    lower = plan->lower_bound;
  }
  std::printf(
      "model=%s mode=%s median_ms=%.4f peak_rss_kib=%ld allocator_calls=%lld block_bytes=%zu "
      "lower_bound=%zu fallbacks=%lld\n",
      model_name.c_str(), mode.c_str(), bench::medianOf(times), usage.ru_maxrss,
      static_cast<long long>(calls), block, lower,
      static_cast<long long>(arena.stats().fallback_allocations));
  return 0;
}
