#include "track/memory_counters.h"

#include <algorithm>

namespace memseal::track {

// Constant-initialised: no first-use guard on the hot path.
NoDestructor<MemoryCounters> g_cpu_counters;

std::int64_t MemoryCounters::highOf(const ThreadSlot& slot) const {
  if (slot.peak_epoch.load(std::memory_order_relaxed) !=
      peak_epoch_.load(std::memory_order_relaxed)) {
    return slot.live_delta.load(std::memory_order_relaxed);
  }
  return slot.delta_high.load(std::memory_order_relaxed);
}

void MemoryCounters::raisePeak(std::int64_t candidate) {
  std::int64_t peak = peak_bytes_.load(std::memory_order_relaxed);
  while (candidate > peak &&
         !peak_bytes_.compare_exchange_weak(peak, candidate, std::memory_order_relaxed)) {
  }
}

void MemoryCounters::handOver(ThreadSlot& slot, std::int64_t delta, std::int64_t high) {
  // At this thread's highest, the live bytes were the shared count, the others' deltas as they
  // stand and that high.
  std::int64_t others = deltas() - slot.live_delta.load(std::memory_order_relaxed);
  std::int64_t before = live_bytes_.fetch_add(delta, std::memory_order_relaxed);
  raisePeak(before + others + high);
  slot.live_delta.store(0, std::memory_order_relaxed);
  slot.delta_high.store(0, std::memory_order_relaxed);
  slot.peak_epoch.store(peak_epoch_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void MemoryCounters::addShared(std::int64_t bytes) {
  std::int64_t live = live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  // Without the slotted threads' deltas: a reading takes them in as they are then.
  if (bytes > 0) raisePeak(live);
}

MemoryCounters::Totals MemoryCounters::sum() const {
  Totals totals;
  std::uint32_t used = usedSlots();
  std::int64_t deltas = 0;
  std::int64_t highest_rise = 0;  // the most any thread's delta stood above where it is now
  for (std::uint32_t i = 0; i < used; ++i) {
    const ThreadSlot& slot = slots_[i];
    totals.allocations += slot.allocations.load(std::memory_order_relaxed);
    totals.allocated_bytes += slot.allocated_bytes.load(std::memory_order_relaxed);
    totals.frees += slot.frees.load(std::memory_order_relaxed);
    if (i == kThreadSlots) continue;  // the shared slot counts into live_bytes_ directly
    std::int64_t delta = slot.live_delta.load(std::memory_order_relaxed);
    deltas += delta;
    highest_rise = std::max(highest_rise, highOf(slot) - delta);
  }
  totals.live_bytes = live_bytes_.load(std::memory_order_relaxed) + deltas;
  totals.peak_bytes =
      std::max(peak_bytes_.load(std::memory_order_relaxed), totals.live_bytes + highest_rise);
  return totals;
}

std::int64_t MemoryCounters::deltas() const {
  std::int64_t total = 0;
  std::uint32_t used = std::min(usedSlots(), kThreadSlots);
  for (std::uint32_t i = 0; i < used; ++i) {
    total += slots_[i].live_delta.load(std::memory_order_relaxed);
  }
  return total;
}

std::int64_t MemoryCounters::liveBytes() const {
  return live_bytes_.load(std::memory_order_relaxed) + deltas();
}

void MemoryCounters::resetPeak() {
  peak_bytes_.store(liveBytes(), std::memory_order_relaxed);
  // Every thread's high so far belongs to the old peak: from here on a thread's delta counts as
  // it stands until the thread raises it again.
  peak_epoch_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryCounters::beginSession() {
  live_bytes_.store(0);
  peak_bytes_.store(0);
  std::uint32_t used = std::min(usedSlots(), kThreadSlots);
  for (std::uint32_t i = 0; i < used; ++i) {
    slots_[i].live_delta.store(0, std::memory_order_relaxed);
    slots_[i].delta_high.store(0, std::memory_order_relaxed);
  }
  Totals totals = sum();
  baseline_allocations_.store(totals.allocations);
  baseline_allocated_bytes_.store(totals.allocated_bytes);
  baseline_frees_.store(totals.frees);
}

DeviceStats MemoryCounters::read(const char* device) const {
  Totals totals = sum();
  DeviceStats stats;
  stats.device = device;
  stats.live_bytes = totals.live_bytes;
  stats.peak_bytes = totals.peak_bytes;
  stats.allocations_total = totals.allocations - baseline_allocations_.load();
  stats.allocated_bytes_total = totals.allocated_bytes - baseline_allocated_bytes_.load();
  stats.frees_total = totals.frees - baseline_frees_.load();
  stats.live_count = stats.allocations_total - stats.frees_total;
  return stats;
}

}  // namespace memseal::track
