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
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  const c10::DataPtr& data_ptr = impl->storage().data_ptr();
  bool moved = false;
  auto move = [&](LiveRecord& record) {
    if (record.lifetime_scope != from) return;
    record.lifetime_scope = to;
    *bytes = record.bytes;
    moved = true;
  };
  // A pool's lease: the lease is what the scope accounts for, whoever made the buffer.
  if (data_ptr.get() != nullptr && poolLeases().update(data_ptr.get(), move)) return moved;
  // CPU storage is the hook's; a CUDA tensor's block is recorded from the allocator's trace hook.
  bool device_block = impl->device_type() == c10::DeviceType::CUDA;
  if (!handedOutByHook(data_ptr) && !device_block) return false;
  liveAllocations().update(data_ptr.get(), [&](LiveRecord& record) {
    if (((record.flags & kDeviceBlock) != 0) == device_block) move(record);
  });
  return moved;
}

}  // namespace memseal::track
