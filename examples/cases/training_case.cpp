// A `memseal explain` case: an MLP trained with Adam. It names its model and optimizer through
// memseal_roles(), so the peak is split into parameters, gradients, optimizer state, activations
// and temporaries by identity.
#include <torch/torch.h>

#include "memseal/torch_roles.h"

namespace {
torch::nn::Sequential model{nullptr};
std::unique_ptr<torch::optim::Adam> optimizer;
}  // namespace

extern "C" __attribute__((visibility("default"))) void setup() {
  torch::manual_seed(0);
  model = torch::nn::Sequential(torch::nn::Linear(512, 1024), torch::nn::ReLU(),
                                torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                                torch::nn::Linear(1024, 10));
  optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), 1e-3);
}

extern "C" __attribute__((visibility("default"))) void step(int) {
  optimizer->zero_grad();
  torch::Tensor loss = model->forward(torch::randn({256, 512})).pow(2).mean();
  loss.backward();
  optimizer->step();
}

extern "C" __attribute__((visibility("default"))) void memseal_roles(memseal::RoleTensors* roles) {
  memseal::addRoles(*roles, *model, optimizer.get());
}
