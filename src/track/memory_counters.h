// Counters of tracked CPU memory, kept per thread in a slot only that thread writes (a plain load
// and store, no read-modify-write) and summed when read, so that threads allocating at once write
// no common cache line on the hot path.
//
// Live bytes: each thread adds what it allocates and subtracts what it frees in its own slot (its
// delta), and hands the delta over to the shared count only once it has moved kHandOverBytes
// either way. The live bytes are the shared count plus every delta, exact once the threads are
// quiet. The peak: each thread also keeps the highest its delta reached since its last hand-over
// (or the last resetPeak); the peak is the highest of the shared peak, which hand-overs raise, and,
// for each thread, the live bytes with that thread at its highest and the others where they are.
// Exact while one thread allocates and frees (the others' deltas stand still); with several at
// once, a peak made of two threads' highs at the same moment can be missed by up to what their
// deltas moved since their last hand-over. A loop whose memory rises and falls within the band
// writes no shared line at all.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/branch_hints.h"
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
  // How far a thread's delta of live bytes moves before it is handed over to the shared count.
  static constexpr std::int64_t kHandOverBytes = std::int64_t{1} << 20;

  constexpr MemoryCounters() = default;

  // The thread's 1-based slot, given on its first call and kept for the thread's life.
  std::uint32_t threadSlot(ThreadState& state) {
    if (state.slot == 0) state.slot = next_slot_.fetch_add(1, std::memory_order_relaxed) + 1;
    return state.slot;
  }
  // Always inline: out of line, each is a call and instruction-cache lines more on every allocation
  // and free, away from the hook's own code (GCC, left to judge, kept onAllocate out of line).
  [[gnu::always_inline]] inline void onAllocate(ThreadState& state, std::int64_t bytes);
  [[gnu::always_inline]] inline void onFree(ThreadState& state, std::int64_t bytes);
  // Counts start from zero for the session that starts now (no tracked allocation or free runs
  // meanwhile: the session is not active yet).
  void beginSession();
  // The peak starts again from what is live now (a step's own peak).
  void resetPeak();
  DeviceStats read(const char* device) const;
  // The peak alone (since the session began or the last resetPeak).
  std::int64_t peakBytes() const { return sum().peak_bytes; }
  // Live bytes alone, for callers that ask on every op.
  std::int64_t liveBytes() const;

 private:
  struct alignas(64) ThreadSlot {
    std::atomic<std::int64_t> allocations{0};
    std::atomic<std::int64_t> allocated_bytes{0};
    std::atomic<std::int64_t> frees{0};
    std::atomic<std::int64_t> live_delta{0};   // not yet handed over to the shared count
    std::atomic<std::int64_t> delta_high{0};   // the highest live_delta since then, in peak_epoch
    std::atomic<std::uint32_t> peak_epoch{0};  // the resetPeak the delta_high belongs to
  };
  struct Totals {
    std::int64_t allocations = 0;
    std::int64_t allocated_bytes = 0;
    std::int64_t frees = 0;
    std::int64_t live_bytes = 0;
    std::int64_t peak_bytes = 0;
  };
  ThreadSlot& slotOf(ThreadState& state) {
    std::uint32_t slot = threadSlot(state);
    return slots_[slot <= kThreadSlots ? slot - 1 : kThreadSlots];
  }
  std::uint32_t usedSlots() const {
    std::uint32_t used = next_slot_.load(std::memory_order_relaxed);
    return used < kThreadSlots ? used : kThreadSlots + 1;
  }
  // The highest live_delta of `slot` that counts towards the peak: a high of an earlier epoch was
  // counted when the peak was reset, and only the delta itself stands now.
  std::int64_t highOf(const ThreadSlot& slot) const;
  // Out of line and rare: the delta of `slot` (at `delta`, its highest `high`) joins the shared
  // count, and the peak takes in the live bytes at that high.
  void handOver(ThreadSlot& slot, std::int64_t delta, std::int64_t high);
  // Threads beyond kThreadSlots: straight to the shared count and peak.
  void addShared(std::int64_t bytes);
  void raisePeak(std::int64_t candidate);
  // The slotted threads' deltas, summed.
  std::int64_t deltas() const;
  Totals sum() const;

  std::atomic<std::int64_t> live_bytes_{0};  // what the threads handed over
  std::atomic<std::int64_t> peak_bytes_{0};
  std::atomic<std::uint32_t> next_slot_{0};
  std::atomic<std::uint32_t> peak_epoch_{0};  // bumped by every resetPeak
  // Sums when the session began (atomics: stats may be read while a session starts).
  std::atomic<std::int64_t> baseline_allocations_{0};
  std::atomic<std::int64_t> baseline_allocated_bytes_{0};
  std::atomic<std::int64_t> baseline_frees_{0};
  ThreadSlot slots_[kThreadSlots + 1];  // the last one is shared
};

void MemoryCounters::onAllocate(ThreadState& state, std::int64_t bytes) {
  ThreadSlot& slot = slotOf(state);
  if (MEMSEAL_UNLIKELY(state.slot > kThreadSlots)) {
    slot.allocations.fetch_add(1, std::memory_order_relaxed);
    slot.allocated_bytes.fetch_add(bytes, std::memory_order_relaxed);
    addShared(bytes);
    return;
  }
  addOwned(slot.allocations, 1);
  addOwned(slot.allocated_bytes, bytes);
  std::int64_t delta = slot.live_delta.load(std::memory_order_relaxed);
  std::int64_t high = slot.delta_high.load(std::memory_order_relaxed);
  std::uint32_t epoch = peak_epoch_.load(std::memory_order_relaxed);
  if (MEMSEAL_UNLIKELY(slot.peak_epoch.load(std::memory_order_relaxed) != epoch)) {
    high = delta;  // the reset counted the delta as it was; highs from here on
    slot.peak_epoch.store(epoch, std::memory_order_relaxed);
  }
  delta += bytes;
  if (delta > high) high = delta;
  if (MEMSEAL_UNLIKELY(delta > kHandOverBytes)) {
    handOver(slot, delta, high);
    return;
  }
  slot.live_delta.store(delta, std::memory_order_relaxed);
  slot.delta_high.store(high, std::memory_order_relaxed);
}

void MemoryCounters::onFree(ThreadState& state, std::int64_t bytes) {
  ThreadSlot& slot = slotOf(state);
  if (MEMSEAL_UNLIKELY(state.slot > kThreadSlots)) {
    slot.frees.fetch_add(1, std::memory_order_relaxed);
    addShared(-bytes);
    return;
  }
  addOwned(slot.frees, 1);
  // A free lowers the delta and never its high: no epoch to look at.
  std::int64_t delta = slot.live_delta.load(std::memory_order_relaxed) - bytes;
  if (MEMSEAL_UNLIKELY(delta < -kHandOverBytes)) {
    handOver(slot, delta, highOf(slot));
    return;
  }
  slot.live_delta.store(delta, std::memory_order_relaxed);
}

// Never destroyed, see session.h.
extern NoDestructor<MemoryCounters> g_cpu_counters;
inline MemoryCounters& cpuCounters() { return g_cpu_counters.get(); }

}  // namespace memseal::track
