#include "analyze/step_peak.h"

#include <algorithm>
#include <unordered_map>

namespace memseal::analyze {

namespace {

// First pass: the total after each event, its highest point (the first time it is reached) and
// the timeline, at most `max_points` points, each the highest of its stretch of events.
void findThePeak(const std::vector<track::LiveRecord>& baseline,
                 const std::vector<track::TraceEvent>& events, std::size_t max_points,
                 StepPeakResult& result) {
  std::unordered_map<const void*, std::int64_t> live_bytes_of;
  live_bytes_of.reserve(baseline.size() + events.size());
  for (const track::LiveRecord& record : baseline) {
    live_bytes_of[record.data] = static_cast<std::int64_t>(record.bytes);
    result.baseline_bytes += static_cast<std::int64_t>(record.bytes);
  }
  std::int64_t live = result.baseline_bytes;
  result.peak_bytes = live;
  std::size_t points = std::max<std::size_t>(1, max_points);
  std::size_t stretch = (events.size() + points - 1) / points;
  if (stretch == 0) stretch = 1;
  std::int64_t stretch_high = live;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const track::TraceEvent& event = events[i];
    if (event.kind == track::TraceEvent::kAllocation) {
      live += event.bytes;
      live_bytes_of[event.data] = event.bytes;
    } else {
      auto found = live_bytes_of.find(event.data);
      live -= found != live_bytes_of.end() ? found->second : event.bytes;
      if (found != live_bytes_of.end()) live_bytes_of.erase(found);
    }
    if (live > result.peak_bytes) {
      result.peak_bytes = live;
      result.peak_event = static_cast<std::int64_t>(i);
    }
    stretch_high = std::max(stretch_high, live);
    if ((i + 1) % stretch == 0 || i + 1 == events.size()) {
      result.timeline.emplace_back(static_cast<std::int64_t>(i), stretch_high);
      stretch_high = live;
    }
  }
  result.end_bytes = live;
}

// Second pass: what was live right after the peak event.
std::unordered_map<const void*, PeakAllocation> liveAfter(
    const std::vector<track::LiveRecord>& baseline, const std::vector<track::TraceEvent>& events,
    std::int64_t peak_event) {
  std::unordered_map<const void*, PeakAllocation> live_now;
  live_now.reserve(baseline.size() + events.size());
  for (const track::LiveRecord& record : baseline) {
    PeakAllocation allocation;
    allocation.data = record.data;
    allocation.bytes = static_cast<std::int64_t>(record.bytes);
    allocation.site = record.site;
    allocation.step = record.step;
    allocation.has_signature = record.signature.dims >= 0;
    allocation.signature = record.signature;
    live_now[record.data] = allocation;
  }
  for (std::int64_t i = 0; i <= peak_event; ++i) {
    const track::TraceEvent& event = events[static_cast<std::size_t>(i)];
    if (event.kind == track::TraceEvent::kAllocation) {
      PeakAllocation allocation;
      allocation.data = event.data;
      allocation.bytes = event.bytes;
      allocation.site = event.site;
      allocation.step = event.step;
      allocation.made_in_step = true;
      allocation.made_at = i;
      live_now[event.data] = allocation;
    } else {
      live_now.erase(event.data);
    }
  }
  return live_now;
}

// Which of what was live at the peak the rest of the step freed (with the tensor as last seen).
void markFreedAfter(const std::vector<track::TraceEvent>& events, std::int64_t peak_event,
                    std::unordered_map<const void*, PeakAllocation>& live_now) {
  for (std::size_t i = static_cast<std::size_t>(peak_event + 1); i < events.size(); ++i) {
    const track::TraceEvent& event = events[i];
    if (event.kind != track::TraceEvent::kFree) continue;
    auto found = live_now.find(event.data);
    // An address freed and reused after the peak: only its first free ends the one live at peak.
    if (found == live_now.end() || found->second.freed_in_step) continue;
    found->second.freed_in_step = true;
    found->second.freed_at = static_cast<std::int64_t>(i);
    if (event.signature.dims >= 0) {
      found->second.signature = event.signature;
      found->second.has_signature = true;
    }
  }
}

}  // namespace

StepPeakResult replayStepPeak(const std::vector<track::LiveRecord>& baseline,
                              const std::vector<track::TraceEvent>& events,
                              std::size_t max_points) {
  StepPeakResult result;
  result.events = static_cast<std::int64_t>(events.size());
  findThePeak(baseline, events, max_points, result);
  std::unordered_map<const void*, PeakAllocation> live_now =
      liveAfter(baseline, events, result.peak_event);
  markFreedAfter(events, result.peak_event, live_now);
  result.live_at_peak.reserve(live_now.size());
  for (auto& [data, allocation] : live_now) result.live_at_peak.push_back(allocation);
  std::sort(result.live_at_peak.begin(), result.live_at_peak.end(),
            [](const PeakAllocation& a, const PeakAllocation& b) {
              return a.bytes != b.bytes ? a.bytes > b.bytes : a.data < b.data;
            });
  return result;
}

}  // namespace memseal::analyze
