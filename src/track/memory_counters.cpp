// A thread's slot is only ever written by that thread, so `x.store(x.load() + 1)` is exact there;
// readers on other threads see each slot's latest value, possibly one allocation behind.
#include "track/memory_counters.h"

namespace memseal::track {

namespace {

void addOwned(std::atomic<std::int64_t>& counter, std::int64_t amount) {
  counter.store(counter.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
}

}  // namespace

MemoryCounters::ThreadSlot& MemoryCounters::slotOf(ThreadState& state) {
  std::uint32_t slot = threadSlot(state);
  return slots_[slot <= kThreadSlots ? slot - 1 : kThreadSlots];
}

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

MemoryCounters::Totals MemoryCounters::sum() const {
  Totals totals;
  std::uint32_t used = next_slot_.load(std::memory_order_relaxed);
  std::uint32_t slots = used < kThreadSlots ? used : kThreadSlots + 1;
  for (std::uint32_t i = 0; i < slots; ++i) {
    totals.allocations += slots_[i].allocations.load(std::memory_order_relaxed);
    totals.allocated_bytes += slots_[i].allocated_bytes.load(std::memory_order_relaxed);
    totals.frees += slots_[i].frees.load(std::memory_order_relaxed);
  }
  return totals;
}

void MemoryCounters::beginSession() {
  live_bytes_.store(0);
  peak_bytes_.store(0);
  Totals totals = sum();
  baseline_allocations_.store(totals.allocations);
  baseline_allocated_bytes_.store(totals.allocated_bytes);
  baseline_frees_.store(totals.frees);
}

DeviceStats MemoryCounters::read(const char* device) const {
  Totals totals = sum();
  DeviceStats stats;
  stats.device = device;
  stats.live_bytes = live_bytes_.load();
  stats.peak_bytes = peak_bytes_.load();
  stats.allocations_total = totals.allocations - baseline_allocations_.load();
  stats.allocated_bytes_total = totals.allocated_bytes - baseline_allocated_bytes_.load();
  stats.frees_total = totals.frees - baseline_frees_.load();
  stats.live_count = stats.allocations_total - stats.frees_total;
  return stats;
}

}  // namespace memseal::track
