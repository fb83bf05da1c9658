// Loop (b) of the tracker benchmark (3-layer MLP, batch 32, Adam) for instruction counts: STEPS
// steps plain, or under the default leak detector (warm-up 5). bench/detector_instruction_counts.sh
// runs it under callgrind with two step counts, so start-up cancels out.
//   memseal_bench_training_loop off|detector STEPS
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "memseal/leak_detector.h"
#include "models/example_models.h"

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "off") != 0 && std::strcmp(argv[1], "detector") != 0)) {
    std::fprintf(stderr, "usage: %s off|detector STEPS\n", argv[0]);
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
  if (std::strcmp(argv[1], "detector") == 0) {
    memseal::DetectorOptions options;
    options.on_leak = memseal::ReportPolicy::kNone;
    detector = std::make_unique<memseal::LeakDetector>(options);
  }
  for (int i = 0; i < steps; ++i) {
    adam.zero_grad();
    torch::Tensor loss = torch::mse_loss(mlp->forward(batch), target);
    loss.backward();
    adam.step();
    if (detector) detector->step();
  }
  if (detector) detector->finish();
  return 0;
}
