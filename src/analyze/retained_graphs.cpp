// Saved tensors have no generic accessor in C++ (Python's `_saved_*` attributes are generated per
// node type), but every node type libtorch ships implements compiled_args(), with which compiled
// autograd collects what a node holds: a CompiledNodeArgs gathers each node's saved variables
// (unpacked) into the call's tensor_args.inputs. Nodes without it (or whose saved tensors were
// released by a backward, or changed in place) throw; what was gathered before stays, and the walk
// goes on.
#include "analyze/retained_graphs.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <algorithm>
#include <cstring>
#include <typeinfo>
#include <unordered_map>

#include "analyze/live_view.h"
#include "track/tensor_reference.h"

namespace memseal::analyze {

namespace {

namespace compiled = torch::dynamo::autograd;

std::vector<std::int64_t> shapeOf(const at::Tensor& tensor) {
  return std::vector<std::int64_t>(tensor.sizes().begin(), tensor.sizes().end());
}

}  // namespace

namespace {

// Python autograd Functions are torch::autograd::PyNode, defined in libtorch_python, which the core
// does not link: told apart by type name.
bool isPythonNode(const torch::autograd::Node& node) {
  return std::strstr(typeid(node).name(), "PyNode") != nullptr;
}

}  // namespace

RetainedGraphs inspectRetainedGraphs(const std::vector<track::NodeRef>& roots,
                                     std::size_t max_nodes, bool python_nodes) {
  RetainedGraphs graphs;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<track::NodeRef> pending;
  for (const auto& root : roots) {
    if (root && seen.insert(root.get()).second) pending.push_back(root);
  }
  std::unordered_map<const c10::TensorImpl*, GradHistoryLeaf> leaves;
  compiled::AutogradCompilerCall call(compiled::SizeInput::STATIC);
  while (!pending.empty() && graphs.nodes_visited < max_nodes) {
    track::NodeRef node = std::move(pending.back());
    pending.pop_back();
    ++graphs.nodes_visited;
    if (auto* accumulate = dynamic_cast<torch::autograd::AccumulateGrad*>(node.get())) {
      const at::Tensor& leaf = accumulate->variable;
      if (const void* storage = storageOf(leaf)) {
        graphs.held_storage.insert(storage);
        if (leaf.device().is_cpu()) {
          graphs.leaf_storage.emplace(storage, static_cast<std::int64_t>(leaf.storage().nbytes()));
        } else {
          graphs.device_leaf_storage.insert(storage);
        }
      }
      const at::Tensor& grad = leaf.defined() ? leaf.unsafeGetTensorImpl()->grad() : leaf;
      if (grad.defined() && grad.grad_fn() != nullptr &&
          leaves.count(leaf.unsafeGetTensorImpl()) == 0) {
        GradHistoryLeaf found;
        found.tensor.known = true;
        found.tensor.shape = shapeOf(leaf);
        found.tensor.dtype = dtypeName(static_cast<std::int8_t>(leaf.scalar_type()));
        found.tensor.requires_grad = leaf.requires_grad();
        found.tensor.is_leaf = true;
        found.grad_fn = grad.grad_fn()->name();
        found.bytes = static_cast<std::int64_t>(leaf.nbytes());
        leaves.emplace(leaf.unsafeGetTensorImpl(), std::move(found));
      }
    }
    graphs.visited.emplace(node.get(), node);
    // A Python Function's compiled_args calls into Python: not where the GIL may not be held.
    bool read_saved = python_nodes || !isPythonNode(*node);
    try {
      if (read_saved) {
        compiled::NodeCall& node_call = call.node_calls.lookup(node);
        compiled::CompiledNodeArgs args(call, node_call);
        node->compiled_args(args);
      }
    } catch (const std::exception&) {
      // No compiled_args for this node type, or its saved tensors are gone or changed: keep what
      // was gathered.
    }
    for (const torch::autograd::Edge& edge : node->next_edges()) {
      if (edge.function && seen.insert(edge.function.get()).second) {
        pending.push_back(edge.function);
      }
    }
  }
  for (const at::Tensor& tensor : call.tensor_args.inputs) {
    if (const void* storage = storageOf(tensor)) graphs.held_storage.insert(storage);
  }
  for (auto& [impl, leaf] : leaves) graphs.leaves_with_grad_history.push_back(std::move(leaf));
  std::sort(graphs.leaves_with_grad_history.begin(), graphs.leaves_with_grad_history.end(),
            [](const GradHistoryLeaf& a, const GradHistoryLeaf& b) { return a.bytes > b.bytes; });
  return graphs;
}

std::unordered_set<const torch::autograd::Node*> nodesReachedFrom(
    const std::vector<track::NodeRef>& from, std::size_t max_nodes) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::unordered_set<const torch::autograd::Node*> reached;
  std::vector<const torch::autograd::Node*> pending;
  for (const track::NodeRef& node : from) {
    if (node && seen.insert(node.get()).second) pending.push_back(node.get());
  }
  // Raw pointers: every node walked is held by the graphs of `from`, which the caller holds.
  while (!pending.empty() && reached.size() < max_nodes) {
    const torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (dynamic_cast<const torch::autograd::AccumulateGrad*>(node) != nullptr) continue;
    reached.insert(node);
    for (const torch::autograd::Edge& edge : node->next_edges()) {
      if (edge.function && seen.insert(edge.function.get()).second) {
        pending.push_back(edge.function.get());
      }
    }
  }
  return reached;
}

}  // namespace memseal::analyze
