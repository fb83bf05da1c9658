// Loop (b) of the tracker benchmark (3-layer MLP, batch 32, Adam) for instruction counts: STEPS
// steps plain, or under the default leak detector (warm-up 5). bench/detector_instruction_counts.sh
// runs it under callgrind with two step counts, so start-up cancels out. Under the detector it also
// prints what its step boundary (LeakDetector::step) took past step 200, in wall time. Both modes
// print the step body (the loop's own work, boundary excluded) past step 200, so that the
// detector's cost splits into the hook on every step (medians), the watched steps (means) and the
// boundary. Compare runs of the two modes made one right after the other: this machine-level
// figure drifts between processes by more than the hook costs.
// `watched` is the detector with ops watched on every step and stacks off: what watching ops costs,
// on every step rather than one in 32 to one in 512.
//   memseal_bench_training_loop off|detector|watched STEPS
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "memseal/leak_detector.h"
#include "models/example_models.h"

int main(int argc, char** argv) {
  bool plain = argc == 3 && std::strcmp(argv[1], "off") == 0;
  bool watched = argc == 3 && std::strcmp(argv[1], "watched") == 0;
  if (argc != 3 || !(plain || watched || std::strcmp(argv[1], "detector") == 0)) {
    std::fprintf(stderr, "usage: %s off|detector|watched STEPS\n", argv[0]);
    return 2;
  }
  at::set_num_threads(1);
  torch::manual_seed(0);
  int steps = std::atoi(argv[2]);
  auto mlp = memseal::examples::makeMlp();
  torch::optim::Adam adam(mlp->parameters(), 1e-3);
  torch::Tensor batch = torch::randn({32, 64});
  torch::Tensor target = torch::randn({32, 10});
  std::unique_ptr<memseal::LeakDetector> detector;
  if (!plain) {
    memseal::DetectorOptions options;
    options.on_leak = memseal::ReportPolicy::kNone;
    if (watched) {
      options.tracker.stacks = memseal::StackMode::kOff;
      options.tracker.watch_ops = memseal::OpWatching::everyStep();
    }
    detector = std::make_unique<memseal::LeakDetector>(options);
  }
  // Past the warm-up and the watched start, as bench/detector_instruction_counts.sh counts.
  constexpr int kSettleSteps = 200;
  auto settled = static_cast<std::size_t>(std::max(0, steps - kSettleSteps));
  std::vector<std::int64_t> boundary_ns;
  std::vector<std::int64_t> body_ns;
  boundary_ns.reserve(settled);
  body_ns.reserve(settled);
  auto nanosecondsSince = [](std::chrono::steady_clock::time_point start) {
    return static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now() - start)
                                         .count());
  };
  for (int i = 0; i < steps; ++i) {
    auto body_start = std::chrono::steady_clock::now();
    adam.zero_grad();
    torch::Tensor loss = torch::mse_loss(mlp->forward(batch), target);
    loss.backward();
    adam.step();
    if (i >= kSettleSteps) body_ns.push_back(nanosecondsSince(body_start));
    if (!detector) continue;
    auto boundary_start = std::chrono::steady_clock::now();
    detector->step();
    if (i >= kSettleSteps) boundary_ns.push_back(nanosecondsSince(boundary_start));
  }
  if (!body_ns.empty()) {
    // The median is an unwatched step (the allocation hook's cost); the mean adds the watched
    // steps, one in 32 to one in 512 past the start.
    std::int64_t total = 0;
    for (std::int64_t ns : body_ns) total += ns;
    std::nth_element(body_ns.begin(), body_ns.begin() + body_ns.size() / 2, body_ns.end());
    std::printf("step body past step %d: median %lld ns, mean %lld ns over %zu\n", kSettleSteps,
                static_cast<long long>(body_ns[body_ns.size() / 2]),
                static_cast<long long>(total / static_cast<std::int64_t>(body_ns.size())),
                body_ns.size());
  }
  if (!detector) return 0;
  detector->finish();
  if (!boundary_ns.empty()) {
    // The median is a boundary that only samples; the mean adds the verdict's renewals and the
    // resident-memory reads, which come every few boundaries.
    std::int64_t total = 0;
    for (std::int64_t ns : boundary_ns) total += ns;
    auto count = static_cast<std::int64_t>(boundary_ns.size());
    std::sort(boundary_ns.begin(), boundary_ns.end());
    std::printf("step boundary past step %d: median %lld ns, mean %lld ns, max %lld ns over %lld\n",
                kSettleSteps, static_cast<long long>(boundary_ns[boundary_ns.size() / 2]),
                static_cast<long long>(total / count), static_cast<long long>(boundary_ns.back()),
                static_cast<long long>(count));
  }
  return 0;
}
