// Counters of tracked CPU memory. Live bytes and their peak are shared atomics: the peak needs one
// order of all allocations and frees. Counts and totals are kept per thread, in a slot only that
// thread writes (a plain load and store, no read-modify-write), and summed when read.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/no_destructor.h"
#include "memseal/tracker.h"
#include "track/thread_state.h"

namespace memseal::track {

// Adds to a counter only one thread ever writes: `x.store(x.load() + amount)` is exact there, with
// no read-modify-write; readers on other threads see its latest value, possibly one add behind.
inline void addOwned(std::atomic<std::int64_t>& counter, std::int64_t amount) {
  counter.store(counter.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
}

class MemoryCounters {
 public:
  // Threads beyond this share one slot, counted with atomic read-modify-writes.
  static constexpr std::uint32_t kThreadSlots = 1024;

  constexpr MemoryCounters() = default;

  // The thread's 1-based slot, given on its first call and kept for the thread's life.
  std::uint32_t threadSlot(ThreadState& state) {
    if (state.slot == 0) state.slot = next_slot_.fetch_add(1, std::memory_order_relaxed) + 1;
    return state.slot;
  }
  // Inline: out of line, each is a call and an instruction-cache line more on every allocation.
  inline void onAllocate(ThreadState& state, std::int64_t bytes);
  inline void onFree(ThreadState& state, std::int64_t bytes);
  // Counts start from zero for the session that starts now.
  void beginSession();
  // The peak starts again from what is live now (a step's own peak).
  void resetPeak() { peak_bytes_.store(live_bytes_.load(std::memory_order_relaxed)); }
  DeviceStats read(const char* device) const;
  // The peak alone (since the session began or the last resetPeak).
  std::int64_t peakBytes() const { return peak_bytes_.load(std::memory_order_relaxed); }
  // Live bytes alone: one load, for callers that ask on every op.
  std::int64_t liveBytes() const { return live_bytes_.load(std::memory_order_relaxed); }

 private:
  struct alignas(64) ThreadSlot {
    std::atomic<std::int64_t> allocations{0};
    std::atomic<std::int64_t> allocated_bytes{0};
    std::atomic<std::int64_t> frees{0};
  };
  struct Totals {
    std::int64_t allocations = 0;
    std::int64_t allocated_bytes = 0;
    std::int64_t frees = 0;
  };
  ThreadSlot& slotOf(ThreadState& state) {
    std::uint32_t slot = threadSlot(state);
    return slots_[slot <= kThreadSlots ? slot - 1 : kThreadSlots];
  }
  Totals sum() const;

  std::atomic<std::int64_t> live_bytes_{0};
  std::atomic<std::int64_t> peak_bytes_{0};
  std::atomic<std::uint32_t> next_slot_{0};
  // Sums when the session began (atomics: stats may be read while a session starts).
  std::atomic<std::int64_t> baseline_allocations_{0};
  std::atomic<std::int64_t> baseline_allocated_bytes_{0};
  std::atomic<std::int64_t> baseline_frees_{0};
  ThreadSlot slots_[kThreadSlots + 1];  // the last one is shared
};

void MemoryCounters::onAllocate(ThreadState& state, std::int64_t bytes) {
  std::int64_t live = live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = peak_bytes_.load(std::memory_order_relaxed);
  while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  ThreadSlot& slot = slotOf(state);
  if (state.slot <= kThreadSlots) {
    addOwned(slot.allocations, 1);
    addOwned(slot.allocated_bytes, bytes);
  } else {
    slot.allocations.fetch_add(1, std::memory_order_relaxed);
    slot.allocated_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
}

void MemoryCounters::onFree(ThreadState& state, std::int64_t bytes) {
  live_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  ThreadSlot& slot = slotOf(state);
  if (state.slot <= kThreadSlots) {
    addOwned(slot.frees, 1);
  } else {
    slot.frees.fetch_add(1, std::memory_order_relaxed);
  }
}

// Never destroyed, see session.h.
extern NoDestructor<MemoryCounters> g_cpu_counters;
inline MemoryCounters& cpuCounters() { return g_cpu_counters.get(); }

}  // namespace memseal::track
