// What the planned arena (plan/) needs from the hot path, and the interfaces it implements: a
// region active on a thread sees that thread's CPU allocations first, and memory it serves is
// freed back to it by address from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include <c10/core/Allocator.h>

#include "track/cpu_allocator_hook.h"  // acquireAllocatorHook while an arena exists

namespace memseal::track {

// Memory a planned arena serves from one of its blocks. Served DataPtrs are simple (context ==
// data, the hook's deleter, as raw_allocate requires: see servedDataPtr), and their frees come
// back here by address: no table insert or remove per allocation.
class ServedMemory {
 public:
  virtual ~ServedMemory() = default;
  // Frees `data` if this memory served it; false if `data` is not inside this memory. May delete
  // this object: nothing may touch it after a true return.
  virtual bool releaseServed(void* data) = 0;
};

// A planned-arena region active on a thread: it may serve allocations itself, and sees those the
// system allocator makes inside it (recording wraps them to learn when they are freed).
class ArenaRegion {
 public:
  virtual ~ArenaRegion() = default;
  // Memory for `bytes` (never 0: the hook handles those) from the plan, or an empty DataPtr to
  // use the system allocator.
  virtual c10::DataPtr serve(std::size_t bytes) = 0;
  virtual c10::DataPtr observe(c10::DataPtr allocation, std::size_t bytes) = 0;
  // A free on this thread while the region runs: true if the region's memory served `data` (it is
  // freed then), without a lock; false sends it on to the other paths.
  virtual bool releaseOnThisThread(void* /*data*/) { return false; }
};

// The region that sees this thread's allocations (nullptr: none).
void setThreadArenaRegion(ArenaRegion* region);
// A DataPtr for memory a region serves: freed through the hook, which finds its owner by address.
c10::DataPtr servedDataPtr(void* data);
// Makes `allocation` a simple DataPtr (context == data, the hook's deleter), remembering its real
// context and deleter, so raw_allocate/raw_deallocate work for everything the hook returns.
c10::DataPtr adoptAllocation(c10::DataPtr allocation);
// Memory [begin, begin + bytes) served by `owner`: frees of pointers inside it, from any thread
// and after any region, reach owner->releaseServed. Registered before serving, unregistered
// before the memory goes back to the system.
void registerServedMemory(const void* begin, std::size_t bytes, ServedMemory* owner);
void unregisterServedMemory(const void* begin);

}  // namespace memseal::track
