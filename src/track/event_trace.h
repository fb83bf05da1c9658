// The allocation trace: every tracked allocation and free, in one order, while a trace is on. It
// feeds what needs more than counters: the peak of a step and what was live at that instant
// (explain), and the event list PyTorch's memory viewer reads (memory_viz export). A fixed ring
// allocated when the trace starts keeps the newest events; the hot path claims a slot with one
// atomic add and takes no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/branch_hints.h"
#include "track/live_record.h"
#include "track/session.h"

namespace memseal::track {

struct TraceEvent {
  enum Kind : std::uint8_t { kAllocation = 1, kFree = 2 };
  std::uint64_t sequence = 0;  // 1-based position in the trace; 0 marks a slot never written
  const void* data = nullptr;
  std::int64_t bytes = 0;
  std::int64_t time_ns = 0;  // coarse steady clock
  std::uint32_t site = 0;
  std::uint32_t step = 0;  // the step the allocation was made in (for frees too)
  Kind kind = kAllocation;
  // For frees: the tensor as last seen (allocations get theirs only when their op returns).
  TensorSignature signature;
};

struct TraceContents {
  std::vector<TraceEvent> events;  // oldest first
  std::uint64_t dropped = 0;       // events not here: older than the ring holds, or given up
  // The position (eventTraceCount() at the time) of the oldest event the ring kept: subtract it
  // from a position to index `events` when `incomplete` is false.
  std::uint64_t first_position = 0;
  // Some event inside the kept window was given up (two writers a lap apart on one slot), so
  // positions no longer index `events` exactly.
  bool incomplete = false;
};

// Starts a trace keeping the newest `capacity` events (at least 1); `prefault` touches the whole
// ring first. False when one runs already or the ring cannot be allocated.
bool startEventTrace(std::size_t capacity, bool prefault = false);
// Stops the trace (waits until no thread is still writing into it) and returns its events.
TraceContents stopEventTrace();
bool eventTraceRunning();
// Events recorded so far by the running trace (for sizing and for explain's step boundaries).
std::uint64_t eventTraceCount();

// Called by the hot path for tracked allocations and frees of the current session: a load and a
// branch inline while no trace runs (the call would cost an instruction-cache line of its own).
void appendTraceEvent(const LiveRecord& record, bool allocation);
inline void traceAllocation(const LiveRecord& record) {
  if (MEMSEAL_UNLIKELY(g_session.event_trace_running.load(std::memory_order_relaxed))) {
    appendTraceEvent(record, /*allocation=*/true);
  }
}
inline void traceFree(const LiveRecord& record) {
  if (MEMSEAL_UNLIKELY(g_session.event_trace_running.load(std::memory_order_relaxed))) {
    appendTraceEvent(record, /*allocation=*/false);
  }
}

}  // namespace memseal::track
