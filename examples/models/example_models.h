// The models the tests and benchmarks share: the core benchmark's conv net, a transformer encoder
// layer, and the 3-layer MLP.
#pragma once

#include <torch/torch.h>

namespace memseal::examples {

struct ConvNetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(3, 32, 3).padding(1)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(32, 64, 3).padding(1)};
  torch::nn::Conv2d conv3{torch::nn::Conv2dOptions(64, 64, 3).padding(1)};
  torch::nn::Linear head{64, 10};
  ConvNetImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv3", conv3);
    register_module("head", head);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1(x));
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(conv3(x));
    return head(x.mean({2, 3}));
  }
};
TORCH_MODULE(ConvNet);

inline torch::nn::Sequential makeMlp() {
  return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 10));
}

inline torch::nn::TransformerEncoderLayer makeEncoderLayer() {
  return torch::nn::TransformerEncoderLayer(
      torch::nn::TransformerEncoderLayerOptions(256, 4).dim_feedforward(1024).dropout(0.0));
}

}  // namespace memseal::examples
