// A `memseal fit` case: one training step of an MLP at a given batch size. Its peak grows
// linearly with the batch (activations) above a constant (parameters, gradients).
#include <torch/torch.h>

namespace {
torch::nn::Sequential model{nullptr};
std::unique_ptr<torch::optim::SGD> optimizer;
}  // namespace

extern "C" __attribute__((visibility("default"))) void setup() {
  torch::manual_seed(0);
  model = torch::nn::Sequential(torch::nn::Linear(256, 512), torch::nn::ReLU(),
                                torch::nn::Linear(512, 512), torch::nn::ReLU(),
                                torch::nn::Linear(512, 10));
  optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), 0.01);
}

extern "C" __attribute__((visibility("default"))) void sized_step(std::int64_t batch, int) {
  optimizer->zero_grad();
  torch::Tensor loss = model->forward(torch::randn({batch, 256})).pow(2).mean();
  loss.backward();
  optimizer->step();
}
