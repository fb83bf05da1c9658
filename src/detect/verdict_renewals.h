// When the leak detector renews its verdict past warm-up and its watched steps (a suspected
// leak's is renewed on every boundary). Each renewal costs a pass over the live table and the
// run's series, about as much as 70 tracked allocations, so a healthy loop's is renewed on one
// boundary in 8 while its memory moves (sooner when its tracked bytes keep rising: memory building
// up), and as the cost allows while the boundaries since the last renewal look alike: tracked
// bytes and tensors as they were then, resident memory no higher than its highest then, no step's
// graph linked to an earlier one's, no graphs suspected then, and no CUDA allocator events (their
// blocks are not in these totals). The schedule itself is boundary_schedule.h's verdictSchedule().
// Pure: its clock and readings are given to it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "detect/boundary_schedule.h"
#include "memseal/leak_detector.h"

namespace memseal::detect {

class VerdictRenewals {
 public:
  // What a boundary shows that a renewal is compared with.
  struct Boundary {
    StepSample sample;                // its live bytes and tensors
    std::int64_t resident_high = 0;   // the highest resident reading so far
    std::uint64_t linked_steps = 0;   // steps whose graph was linked to an earlier one's
    bool device_events_seen = false;  // a CUDA allocator reported events
  };

  // Whether the boundary `boundary`, ending the step before `current_step`, at `now_ns`, renews
  // the verdict; `forming`: warm-up and the steps after it, or a suspected leak (every boundary).
  bool due(const Boundary& boundary, std::uint32_t current_step, bool forming,
           std::int64_t now_ns) {
    if (!moved_) moved_ = moved(boundary);
    if (boundary.sample.live_bytes > previous_live_bytes_) ++rises_since_renewal_;
    previous_live_bytes_ = boundary.sample.live_bytes;
    if (forming) return true;
    if (moved_) {
      return rises_since_renewal_ >= kRisesForRenewal || schedule_.leastStridePassed(current_step);
    }
    return schedule_.due(current_step, now_ns, false);
  }

  // Boundaries with more tracked bytes than the boundary before, since the last renewal, that
  // renew the verdict before the least stride has passed: memory building up. A build-up not much
  // longer than the stride (predictions gathered over a short pass) is then judged while it is
  // still held wherever the stride's boundaries fall, not only when one of them happens to fall
  // late in it. Rises, not new highs: a pass's first steps may hold more than the rest (its data
  // loaded, a workspace), and the build-up then climbs below that. A loop whose tracked bytes go up
  // and down at random rises on about half its boundaries, which renews about as often as the
  // stride would; a steady one never rises.
  static constexpr std::uint32_t kRisesForRenewal = 4;

  // A renewal at `boundary`, begun at `start_ns`; `graphs_suspected`: its evidence's.
  void noteRenewal(const Boundary& boundary, std::uint32_t current_step, bool graphs_suspected,
                   std::int64_t start_ns, std::int64_t end_ns) {
    schedule_.noteDone(current_step, start_ns, end_ns);
    last_ = boundary;
    graphs_suspected_ = graphs_suspected;
    moved_ = false;
    previous_live_bytes_ = boundary.sample.live_bytes;
    rises_since_renewal_ = 0;
  }

  // Whether a renewal past warm-up finds more tracked memory (CPU tensors and CUDA blocks) than
  // every one since warm-up did (the first one only sets the mark).
  bool newTrackedHigh(std::int64_t tracked) {
    bool higher = tracked_high_ >= 0 && tracked > tracked_high_;
    tracked_high_ = std::max(tracked_high_, tracked);
    return higher;
  }

 private:
  bool moved(const Boundary& boundary) const {
    return graphs_suspected_ || boundary.device_events_seen ||
           boundary.sample.live_bytes != last_.sample.live_bytes ||
           boundary.sample.live_count != last_.sample.live_count ||
           boundary.resident_high > last_.resident_high ||
           boundary.linked_steps != last_.linked_steps;
  }

  CostBoundedSchedule schedule_ = verdictSchedule();
  Boundary last_;  // at the last renewal
  bool graphs_suspected_ = false;
  bool moved_ = true;                     // since the last renewal
  std::int64_t previous_live_bytes_ = 0;  // tracked bytes at the boundary before
  std::uint32_t rises_since_renewal_ = 0;
  std::int64_t tracked_high_ = -1;  // -1 before the first renewal past warm-up
};

}  // namespace memseal::detect
