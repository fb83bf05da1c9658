// A `memseal check` case that must not be flagged: a training step that keeps only a float.
#include <torch/torch.h>

namespace {
torch::nn::Linear model{nullptr};
std::unique_ptr<torch::optim::Adam> optimizer;
float total_loss = 0;
}  // namespace

extern "C" __attribute__((visibility("default"))) void setup() {
  torch::manual_seed(0);
  model = torch::nn::Linear(16, 1);
  optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), 0.01);
}

extern "C" __attribute__((visibility("default"))) void step(int) {
  optimizer->zero_grad();
  torch::Tensor loss = model->forward(torch::randn({8, 16})).pow(2).mean();
  loss.backward();
  optimizer->step();
  total_loss += loss.item<float>();
}
