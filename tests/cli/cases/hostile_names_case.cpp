// A leaky case whose scope name is markup: the HTML report must show it as text, never run it.
#include <torch/torch.h>

#include "memseal/tracker.h"

namespace {
std::vector<torch::Tensor> kept;
}  // namespace

extern "C" __attribute__((visibility("default"))) void step(int) {
  MEMSEAL_REGION(
      "<script>document.title='pwned';document.body.dataset.pwned='1'</script><img src=x "
      "onerror=\"document.title='pwned'\">");
  kept.push_back(torch::randn({64, 64}));
}
