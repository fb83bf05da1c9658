// NoAllocationScope: counts the calling thread's allocations that reach the system allocator. It
// holds the allocator hook so that allocations go through it even when nothing tracks them.
#include "memseal/scope.h"
#include "track/cpu_allocator_hook.h"
#include "track/lifetime_scopes.h"

namespace memseal {

NoAllocationScope::NoAllocationScope() {
  track::acquireAllocatorHook();
  start_ = track::threadAllocationCounts().system;
}

NoAllocationScope::~NoAllocationScope() { track::releaseAllocatorHook(); }

std::int64_t NoAllocationScope::allocations() const {
  return static_cast<std::int64_t>(track::threadAllocationCounts().system - start_);
}

}  // namespace memseal
