// A `memseal fit` case whose peak is quadratic in its size: self-attention over a sequence of
// `length` tokens keeps a length x length score matrix.
#include <torch/torch.h>

extern "C" __attribute__((visibility("default"))) void sized_step(std::int64_t length, int) {
  torch::NoGradGuard no_grad;
  torch::Tensor q = torch::randn({length, 64});
  torch::Tensor k = torch::randn({length, 64});
  torch::Tensor v = torch::randn({length, 64});
  torch::Tensor scores = torch::softmax(q.matmul(k.t()) / 8.0, -1);
  torch::Tensor out = scores.matmul(v);
  (void)out.sum().item<float>();
}
