// A program linked to libmemseal that marks its iterations with MEMSEAL_REGION("request") and never
// starts a tracker itself: `memseal run --step-on request` takes a step at each scope. Each
// iteration keeps its output (a leak, tensors-retained).
#include <torch/torch.h>

#include <cstdio>
#include <vector>

#include "memseal/tracker.h"

int main() {
  torch::manual_seed(0);
  torch::Tensor weight = torch::randn({128, 128});
  std::vector<torch::Tensor> kept;
  for (int i = 0; i < 4000; ++i) {
    MEMSEAL_REGION("request");
    torch::Tensor input = torch::randn({4, 128});
    kept.push_back(torch::relu(torch::mm(input, weight)).sum(1));
  }
  std::printf("kept %zu\n", kept.size());
  return 0;
}
