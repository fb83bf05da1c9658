// Scopes are per thread and nest, so the innermost one is a plain field of the thread's state.
#include "track/lifetime_scopes.h"

#include <ATen/core/TensorBase.h>

#include "track/cpu_allocator_hook.h"
#include "track/live_table.h"
#include "track/pool_leases.h"
#include "track/thread_state.h"

namespace memseal::track {

std::uint32_t enterLifetimeScope(std::uint32_t scope) {
  ThreadState& state = threadState();
  std::uint32_t previous = state.lifetime_scope;
  state.lifetime_scope = scope;
  return previous;
}

std::uint32_t currentLifetimeScope() { return threadState().lifetime_scope; }

ThreadAllocationCounts threadAllocationCounts() {
  const ThreadState& state = threadState();
  return {state.allocations_in_thread, state.bytes_in_thread, state.system_allocations};
}

bool moveToLifetimeScope(const at::TensorBase& tensor, std::uint32_t from, std::uint32_t to,
                         std::size_t* bytes) {
  if (!tensor.defined() || !tensor.unsafeGetTensorImpl()->has_storage()) return false;
  const c10::DataPtr& data_ptr = tensor.unsafeGetTensorImpl()->storage().data_ptr();
  bool moved = false;
  auto move = [&](LiveRecord& record) {
    if (record.lifetime_scope != from) return;
    record.lifetime_scope = to;
    *bytes = record.bytes;
    moved = true;
  };
  // A pool's lease: the lease is what the scope accounts for, whoever made the buffer.
  if (data_ptr.get() != nullptr && poolLeases().update(data_ptr.get(), move)) return moved;
  if (!handedOutByHook(data_ptr)) return false;
  liveAllocations().update(data_ptr.get(), move);
  return moved;
}

}  // namespace memseal::track
