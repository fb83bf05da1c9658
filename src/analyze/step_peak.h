// The peak of one step, replayed from what was live when it began and the trace of its allocations
// and frees: the highest live total, the event after which it held, what was live then (and
// whether each was made in the step, freed in it), and the live total over the step.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "track/event_trace.h"
#include "track/live_record.h"

namespace memseal::analyze {

struct PeakAllocation {
  const void* data = nullptr;
  std::int64_t bytes = 0;
  std::uint32_t site = 0;
  std::uint32_t step = 0;  // made in
  bool made_in_step = false;
  bool freed_in_step = false;
  std::int64_t made_at = -1;  // the step's event that made it; -1 when live as the step began
  std::int64_t freed_at =
      -1;  // the event that freed it after the peak; -1 when it outlived the step
  bool has_signature = false;  // from the free event, else to be read from the live table
  track::TensorSignature signature;
};

struct StepPeakResult {
  std::int64_t baseline_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t end_bytes = 0;
  std::int64_t peak_event = -1;  // -1: the step never went above where it began
  std::int64_t events = 0;
  std::vector<PeakAllocation> live_at_peak;
  std::vector<std::pair<std::int64_t, std::int64_t>> timeline;  // (event, live bytes)
};

// `baseline`: the session's records live when the step began; `events`: the step's trace, oldest
// first. Frees of allocations the baseline does not hold (made before the trace's window) lower
// the total but are otherwise ignored. The timeline has at most `max_points` points, each the
// highest total of its stretch of events.
StepPeakResult replayStepPeak(const std::vector<track::LiveRecord>& baseline,
                              const std::vector<track::TraceEvent>& events,
                              std::size_t max_points = 512);

}  // namespace memseal::analyze
