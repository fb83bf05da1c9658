#include "explain/backward_roles.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include "analyze/live_view.h"
#include "analyze/retained_graphs.h"
#include "track/event_trace.h"

namespace memseal::explain {

namespace {

// Enough for the deepest models; a graph beyond it is described from the nodes walked.
constexpr std::size_t kMaxNodesWalked = 1u << 20;

}  // namespace

void BackwardRoles::onNodeStart(const track::NodeRef& node) {
  std::lock_guard<std::mutex> lock(mutex_);
  backward_ran_ = true;
  auto walked = walked_.find(node.get());
  if (walked != walked_.end() && !walked->second.expired()) return;
  auto now = static_cast<std::int64_t>(track::eventTraceCount());
  // Backward runs without the GIL: Python Functions' saved tensors are not read here.
  analyze::RetainedGraphs graph =
      analyze::inspectRetainedGraphs({node}, kMaxNodesWalked, /*python_nodes=*/false);
  for (auto& [address, weak] : graph.visited) walked_[address] = std::move(weak);
  for (const void* storage : graph.held_storage) {
    if (graph.leaf_storage.count(storage) == 0 && graph.device_leaf_storage.count(storage) == 0) {
      saved_[storage].at_events.push_back(now);
    }
  }
  device_leaves_.insert(graph.device_leaf_storage.begin(), graph.device_leaf_storage.end());
  for (const auto& [storage, bytes] : graph.leaf_storage) {
    Seen& seen = leaves_[storage];
    seen.at_events.push_back(now);
    seen.bytes = bytes;
  }
}

void BackwardRoles::onNodeEnd(const track::NodeRef& node) {
  auto* accumulate = dynamic_cast<torch::autograd::AccumulateGrad*>(node.get());
  if (accumulate == nullptr || !accumulate->variable.defined()) return;
  // Any device's: a CUDA gradient's address is its block's, which explain's device peak reads.
  const void* grad = analyze::storageOf(accumulate->variable.grad());
  if (grad == nullptr) return;
  auto now = static_cast<std::int64_t>(track::eventTraceCount());
  std::lock_guard<std::mutex> lock(mutex_);
  gradients_[grad].at_events.push_back(now);
}

void BackwardRoles::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  walked_.clear();
  saved_.clear();
  leaves_.clear();
  gradients_.clear();
  device_leaves_.clear();
  backward_ran_ = false;
}

bool BackwardRoles::backwardRan() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return backward_ran_;
}

BackwardRoles::SeenStorage BackwardRoles::saved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return saved_;
}

BackwardRoles::SeenStorage BackwardRoles::leaves() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return leaves_;
}

BackwardRoles::SeenStorage BackwardRoles::gradients() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return gradients_;
}

std::unordered_set<const void*> BackwardRoles::deviceLeaves() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return device_leaves_;
}

}  // namespace memseal::explain
