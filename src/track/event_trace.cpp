#include "track/event_trace.h"

#include <cstdlib>
#include <mutex>
#include <thread>

namespace memseal::track {

namespace {

struct Ring {
  TraceEvent* slots = nullptr;
  std::atomic<bool>* busy = nullptr;  // a writer is in the slot (positions p and p + capacity
                                      // share it: a writer a whole lap behind must not tear it)
  std::size_t allocated = 0;          // slots allocated (kept for later, larger or not, traces)
  std::size_t capacity = 0;           // slots this trace uses: the newest `capacity` events
  std::size_t used = 0;               // slots the previous trace wrote (to clear)
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> lost{0};  // events given up because their slot was busy
};

std::mutex g_control;  // start and stop
Ring g_ring;
std::atomic<Ring*> g_active{nullptr};  // g_session.event_trace_running mirrors it, for the hot path
// Writers inside the ring: stop waits for them before reading (as setGradFnObserver does).
std::atomic<std::int64_t> g_writers{0};

}  // namespace

void appendTraceEvent(const LiveRecord& record, bool allocation) {
  TraceEvent::Kind kind = allocation ? TraceEvent::kAllocation : TraceEvent::kFree;
  g_writers.fetch_add(1, std::memory_order_seq_cst);
  if (Ring* ring = g_active.load(std::memory_order_seq_cst)) {
    std::uint64_t position = ring->next.fetch_add(1, std::memory_order_relaxed);
    std::size_t slot = position % ring->capacity;
    if (ring->busy[slot].exchange(true, std::memory_order_acquire)) {
      // Another writer, a lap apart, holds the slot: give this event up (counted), never wait.
      ring->lost.fetch_add(1, std::memory_order_relaxed);
      g_writers.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    TraceEvent& event = ring->slots[slot];
    event.data = record.data;
    event.bytes = static_cast<std::int64_t>(record.bytes);
    event.time_ns = record.time_ns;
    event.site = record.site;
    event.step = record.step;
    event.kind = kind;
    if (kind == TraceEvent::kFree) event.signature = record.signature;
    event.sequence = position + 1;
    ring->busy[slot].store(false, std::memory_order_release);
  }
  g_writers.fetch_sub(1, std::memory_order_seq_cst);
}

bool startEventTrace(std::size_t capacity, bool prefault) {
  std::lock_guard<std::mutex> lock(g_control);
  if (g_active.load() != nullptr) return false;
  if (capacity == 0) capacity = 1;
  if (g_ring.allocated < capacity) {
    // calloc, not the tracked allocator; the old ring is no longer used by anyone (stop waited).
    auto* slots = static_cast<TraceEvent*>(std::calloc(capacity, sizeof(TraceEvent)));
    auto* busy = static_cast<std::atomic<bool>*>(std::calloc(capacity, sizeof(std::atomic<bool>)));
    if (slots == nullptr || busy == nullptr) {
      std::free(slots);
      std::free(busy);
      return false;
    }
    std::free(g_ring.slots);
    std::free(g_ring.busy);
    g_ring.slots = slots;
    g_ring.busy = busy;
    g_ring.allocated = capacity;
    g_ring.used = 0;
  }
  // Only the slots the last trace wrote need clearing: the rest are untouched zero pages.
  for (std::size_t i = 0; i < g_ring.used; ++i) g_ring.slots[i].sequence = 0;
  if (prefault) {
    // Touch the ring now, so its pages join the resident set before anything measures it (the
    // leak detector's resident-memory baseline), not step by step as it fills.
    for (std::size_t i = 0; i < capacity; ++i) g_ring.slots[i].sequence = 0;
  }
  g_ring.capacity = capacity;
  g_ring.lost.store(0);
  g_ring.next.store(0);
  g_active.store(&g_ring, std::memory_order_seq_cst);
  g_session.event_trace_running.store(true, std::memory_order_seq_cst);
  return true;
}

TraceContents stopEventTrace() {
  std::lock_guard<std::mutex> lock(g_control);
  TraceContents contents;
  if (g_active.load() == nullptr) return contents;
  g_session.event_trace_running.store(false, std::memory_order_seq_cst);
  g_active.store(nullptr, std::memory_order_seq_cst);
  while (g_writers.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  std::uint64_t written = g_ring.next.load();
  std::uint64_t kept = written < g_ring.capacity ? written : g_ring.capacity;
  g_ring.used = static_cast<std::size_t>(kept);
  contents.first_position = written - kept;
  contents.events.reserve(kept);
  std::uint64_t missing = 0;
  for (std::uint64_t position = written - kept; position < written; ++position) {
    const TraceEvent& event = g_ring.slots[position % g_ring.capacity];
    if (event.sequence == position + 1) {
      contents.events.push_back(event);
    } else {
      ++missing;  // given up, or overwritten by a writer a lap behind
    }
  }
  contents.dropped = written - kept + missing;
  contents.incomplete = missing > 0 || g_ring.lost.load() > 0;
  return contents;
}

bool eventTraceRunning() { return g_active.load(std::memory_order_acquire) != nullptr; }

std::uint64_t eventTraceCount() {
  Ring* ring = g_active.load(std::memory_order_acquire);
  return ring != nullptr ? ring->next.load(std::memory_order_relaxed) : 0;
}

}  // namespace memseal::track
