// Autograd nodes as memseal holds them. libtorch hands them out (Tensor::grad_fn(), Edge::function,
// get_current_node()) as std::shared_ptr<torch::autograd::Node> up to 2.12 and as
// c10::intrusive_ptr<torch::autograd::Node> from 2.13 on. NodeRef is this release's strong
// reference and WeakNodeRef its weak one, default-constructible in both (as std::weak_ptr is, and
// c10::weak_intrusive_ptr is not).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>

#include "common/torch_release.h"

namespace memseal::track {

#if MEMSEAL_TORCH_AT_LEAST(2, 13)
using NodeRef = c10::intrusive_ptr<torch::autograd::Node>;

class WeakNodeRef {
 public:
  WeakNodeRef() noexcept : weak_(NodeRef()) {}
  // Implicit, as std::weak_ptr's from a std::shared_ptr.
  WeakNodeRef(const NodeRef& node) noexcept : weak_(node) {}  // NOLINT(google-explicit-constructor)
  NodeRef lock() const noexcept { return weak_.lock(); }
  bool expired() const noexcept { return weak_.expired(); }
  void reset() noexcept { weak_.reset(); }

 private:
  c10::weak_intrusive_ptr<torch::autograd::Node> weak_;
};
#else
using NodeRef = std::shared_ptr<torch::autograd::Node>;
using WeakNodeRef = std::weak_ptr<torch::autograd::Node>;
#endif

// A wrong release boundary above fails here, not in the files that use the references.
static_assert(std::is_same_v<NodeRef, decltype(torch::autograd::Edge::function)>,
              "NodeRef must be the node reference of this libtorch's autograd edges");

}  // namespace memseal::track
