// Lifetime scopes: "nothing made in here is still alive after it, except what I said I keep".
// Like TorchSharp's dispose scopes, but for C++ where reference counting frees tensors: memseal
// does the accounting and enforces it.
//
//   memseal::LifetimeScope scope("preprocess");
//   torch::Tensor features = scope.keep(normalize(image));   // moved to the enclosing scope
//   scope.close();   // throws ScopeLeakError if anything else made here is still alive
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/TensorBase.h>

#include "memseal/export.h"
#include "memseal/policy.h"
#include "memseal/tracker.h"

namespace memseal {

struct ScopeStats {
  std::int64_t made = 0;  // CPU tensor allocations made on this thread while the scope was active
  std::int64_t made_bytes = 0;
  std::int64_t freed = 0;  // made and already freed when the scope closed
  std::int64_t kept = 0;   // declared with keep() (moved to the enclosing scope) or detach()
  std::int64_t kept_bytes = 0;
  std::int64_t survivors = 0;  // made here, not kept, still alive at close
  std::int64_t survivor_bytes = 0;
};

struct ScopeSurvivor {
  AllocationSite site;
  LiveAllocation allocation;
};

struct MEMSEAL_API ScopeReport {
  std::string name;
  ScopeStats stats;
  std::vector<ScopeSurvivor> survivors;  // newest first
  bool clean() const { return stats.survivors == 0; }
  std::string toText() const;
};

class MEMSEAL_API ScopeLeakError : public std::runtime_error {
 public:
  explicit ScopeLeakError(ScopeReport report);
  const ScopeReport& report() const { return report_; }

 private:
  ScopeReport report_;
};

struct ScopeOptions {
  ReportPolicy on_survivors = ReportPolicy::kThrow;
  std::function<void(const ScopeReport&)> on_survivors_callback;
  // Used to start a tracker when none runs. Unset options come from the environment, else stacks
  // on (they make survivors' sites precise) and ops watched on every step.
  TrackerOptions tracker;
};

// Counts allocations made on its thread while active (libtorch's CPU autograd runs backward on the
// calling thread, so backward inside a scope counts). Nested scopes: the innermost one owns what
// is made while it is active; keep() moves a tensor to the enclosing scope, like TorchSharp's
// MoveToOuter. Starts a tracker if none runs and stops it again when it closes.
class MEMSEAL_API LifetimeScope {
 public:
  explicit LifetimeScope(std::string name = "scope", ScopeOptions options = {});
  // Closes the scope if close() was not called. Never throws: with kThrow it prints instead, and
  // while an exception unwinds through the scope it only restores the enclosing scope.
  ~LifetimeScope();
  LifetimeScope(const LifetimeScope&) = delete;
  LifetimeScope& operator=(const LifetimeScope&) = delete;

  // Declares that `tensor` outlives the scope: it moves to the enclosing scope (or to none).
  // Returns its argument, so `torch::Tensor out = scope.keep(f(x));` reads naturally.
  template <typename TensorType>
  const TensorType& keep(const TensorType& tensor) {
    moveToEnclosingScope(tensor);
    return tensor;
  }
  // Removes `tensor` from every scope's accounting (TorchSharp's Detach).
  template <typename TensorType>
  const TensorType& detach(const TensorType& tensor) {
    removeFromScopes(tensor);
    return tensor;
  }

  // Ends the scope, applies the policy and returns the report. Call once.
  ScopeReport close();

 private:
  void moveToEnclosingScope(const at::TensorBase& tensor);
  void removeFromScopes(const at::TensorBase& tensor);

  struct State;
  std::unique_ptr<State> state_;
};

// Asserts that a region makes no system allocation at all (for steady-state inference meant to be
// allocation-free, such as a planned arena's replays: memory served from an arena does not count).
class MEMSEAL_API NoAllocationScope {
 public:
  NoAllocationScope();
  ~NoAllocationScope();
  NoAllocationScope(const NoAllocationScope&) = delete;
  NoAllocationScope& operator=(const NoAllocationScope&) = delete;
  // CPU allocations that reached the system allocator on this thread since construction.
  std::int64_t allocations() const;

 private:
  std::uint64_t start_;
};

}  // namespace memseal
