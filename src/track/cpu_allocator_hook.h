// The CPU allocator hook: an allocator installed with c10::SetCPUAllocator in front of whatever
// allocator was there, which records every allocation it passes on while a session is active and
// lets an arena region serve allocations first (arena_region.h).
#pragma once

#include <c10/core/Allocator.h>

namespace memseal::track {

// Keeps the hook installed while anyone (a session, an arena, a no-allocation scope) needs it.
void acquireAllocatorHook();
void releaseAllocatorHook();

// The deleter of every DataPtr the hook hands out (tracked, adopted or served).
void trackedFree(void* data);
inline bool handedOutByHook(const c10::DataPtr& data_ptr) {
  return data_ptr.get_deleter() == &trackedFree;
}

}  // namespace memseal::track
