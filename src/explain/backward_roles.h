// What backward reveals by identity while it runs: when the engine starts evaluating a graph it has
// not walked yet, every tensor the graph saved for backward is still held, so walking it from that
// first node gives the activations and the leaves (parameters); when an AccumulateGrad node
// finishes, its variable's .grad is a gradient, whoever allocated it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "track/grad_fn_observer.h"

namespace memseal::explain {

class BackwardRoles final : public track::BackwardObserver {
 public:
  void onNodeStart(const track::NodeRef& node) override;
  void onNodeEnd(const track::NodeRef& node) override;

  // What was seen of a storage, and when: the number of trace events recorded by then, so the
  // analysis gives the role only to the allocation that held that address at that moment.
  struct Seen {
    std::vector<std::int64_t> at_events;  // every time it was seen (a backward per micro-batch)
    std::int64_t bytes = 0;               // the storage's size (leaves only)
  };
  using SeenStorage = std::unordered_map<const void*, Seen>;

  void clear();
  bool backwardRan() const;
  SeenStorage saved() const;
  SeenStorage leaves() const;
  SeenStorage gradients() const;  // any device's, by storage address
  // Leaves on a device (a CUDA model's parameters) backward reached, by device address.
  std::unordered_set<const void*> deviceLeaves() const;

 private:
  mutable std::mutex mutex_;
  // Nodes already walked, weakly: an address that comes back once its node died is a new node.
  std::unordered_map<const torch::autograd::Node*, track::WeakNodeRef> walked_;
  SeenStorage saved_;
  SeenStorage leaves_;
  SeenStorage gradients_;
  std::unordered_set<const void*> device_leaves_;
  bool backward_ran_ = false;
};

}  // namespace memseal::explain
