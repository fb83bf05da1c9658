#include "track/memory_counters.h"

namespace memseal::track {

// Constant-initialised: no first-use guard on the hot path.
NoDestructor<MemoryCounters> g_cpu_counters;

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
