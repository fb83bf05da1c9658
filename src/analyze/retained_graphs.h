// What retained autograd graphs hold, read by walking them from their roots (nodes the leak
// detector found alive long after their step): the tensors their nodes saved for backward, and
// leaves whose .grad carries history, the cycle leaf -> .grad -> grad_fn -> ... -> AccumulateGrad
// -> leaf that backward(create_graph=true) leaves behind and that reference counting never frees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memseal/tracker.h"
#include "track/autograd_node.h"

namespace memseal::analyze {

struct GradHistoryLeaf {
  TensorInfo tensor;    // the leaf (a parameter)
  std::string grad_fn;  // of its .grad, e.g. "AddBackward0"
  std::int64_t bytes = 0;
};

struct RetainedGraphs {
  std::vector<GradHistoryLeaf> leaves_with_grad_history;  // largest first
  // Storage (data pointers) of the tensors the graphs' nodes hold: saved for backward, and the
  // leaves their AccumulateGrad nodes accumulate into.
  std::unordered_set<const void*> held_storage;
  // Of those, the leaves (AccumulateGrad's variables: parameters and inputs that require grad),
  // with their storage's size.
  std::unordered_map<const void*, std::int64_t> leaf_storage;
  // The leaves on other devices (a CUDA model's parameters), by their device address.
  std::unordered_set<const void*> device_leaf_storage;
  // Every node walked, weakly: an address seen again later is the same node only while alive.
  std::unordered_map<const torch::autograd::Node*, track::WeakNodeRef> visited;
  std::size_t nodes_visited = 0;
};

// Walks the graphs behind `roots` through next_edges, visiting at most `max_nodes` nodes. Must run
// where no backward runs through those graphs at the same time (the detector's step boundary).
// `python_nodes`: also read what Python autograd Functions (PyNode) saved, which calls into Python
// and needs the GIL; false where it may not be held (inside a running backward).
RetainedGraphs inspectRetainedGraphs(const std::vector<track::NodeRef>& roots,
                                     std::size_t max_nodes, bool python_nodes = true);

// The nodes met walking down from `from` (the autograd nodes of tensors a program keeps), at most
// `max_nodes`: what the kept tensors' graphs hold. A parameter's AccumulateGrad node, which every
// graph of its model reaches, is left out (and not walked through). Valid while `from` is held.
std::unordered_set<const torch::autograd::Node*> nodesReachedFrom(
    const std::vector<track::NodeRef>& from, std::size_t max_nodes);

}  // namespace memseal::analyze
