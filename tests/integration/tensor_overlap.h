// Whether a tensor's bytes overlap those of other live tensors: the invariant of memory a planned
// arena serves (arena_test.cpp, arena_concurrency_test.cpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace memseal::test {

// True when `fresh` shares a byte with a defined tensor of `tensors` other than the one at `skip`.
inline bool overlapsAny(const torch::Tensor& fresh, const std::vector<torch::Tensor>& tensors,
                        std::ptrdiff_t skip = -1) {
  auto begin = reinterpret_cast<std::uintptr_t>(fresh.data_ptr());
  auto end = begin + fresh.nbytes();
  for (std::size_t j = 0; j < tensors.size(); ++j) {
    if (static_cast<std::ptrdiff_t>(j) == skip || !tensors[j].defined()) continue;
    auto other = reinterpret_cast<std::uintptr_t>(tensors[j].data_ptr());
    if (begin < other + tensors[j].nbytes() && other < end) return true;
  }
  return false;
}

}  // namespace memseal::test
