// A `memseal check` case that leaks on purpose: the loss is accumulated with its autograd history.
// Build it as a shared library against the same libtorch as memseal (see examples/cases/README.md).
#include <torch/torch.h>

namespace {
torch::nn::Linear model{nullptr};
std::unique_ptr<torch::optim::SGD> optimizer;
torch::Tensor total_loss;
}  // namespace

extern "C" __attribute__((visibility("default"))) void setup() {
  torch::manual_seed(0);
  model = torch::nn::Linear(16, 1);
  optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), 0.01);
  total_loss = torch::zeros({});
}

extern "C" __attribute__((visibility("default"))) void step(int) {
  optimizer->zero_grad();
  torch::Tensor loss = model->forward(torch::randn({8, 16})).pow(2).mean();
  loss.backward();
  optimizer->step();
  total_loss += loss;  // the leak: keeps every step's graph alive
}
