// Which step boundaries do a costly piece of work: as often as its cost allows beside the time the
// steps take, between a least and a most number of boundaries apart. Two pieces use it.
//
// Resident memory: the read is a system call (pread of /proc/self/statm), about 1 us on bare metal
// and 3 us in a virtual machine whose kernel entries pay for speculation mitigations; beside a
// 200 us training step that is 1-2% of the step. While a verdict is being formed (warm-up and the
// steps after it, a suspected leak) every boundary reads it; otherwise a boundary reads it when
// the time since the last read is at least 1,024 times what that read cost, and at least every 8
// boundaries. A loop of steps of 4 ms or longer is read on every boundary; a 200 us one on every
// eighth.
//
// The verdict's renewal: a pass over the live table and the run's series, 10-20 us past a few
// hundred steps of a small model. Memory that moved since the last renewal (tracked bytes or
// tensors at a boundary other than then, resident memory above its highest then, a step's graph
// linked to an earlier one's, graphs suspected, and any CUDA program) is judged every 8 boundaries
// as before (sooner while tracked bytes rise: verdict_renewals.h); a loop whose boundaries all
// look alike has nothing new for a renewal to see, and renews when 512 times the last renewal's
// cost has passed, at least every 64 boundaries.
#pragma once

#include <chrono>
#include <cstdint>

namespace memseal::detect {

// The steady clock in nanoseconds: the times the schedules below are given, and the cost-bounded
// call of mallinfo2 (detect/resident_memory.cpp).
inline std::int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CostBoundedSchedule {
 public:
  // Work that may take up to 1/time_per_cost of the time, on boundaries at least min_stride and
  // at most max_stride apart.
  constexpr CostBoundedSchedule(std::int64_t time_per_cost, std::uint32_t min_stride,
                                std::uint32_t max_stride)
      : time_per_cost_(time_per_cost), min_stride_(min_stride), max_stride_(max_stride) {}

  // Whether the boundary ending `step`, at `now_ns` (steady clock), does the work.
  bool due(std::uint32_t step, std::int64_t now_ns, bool every_boundary) const {
    if (every_boundary || !done_yet_) return true;
    if (!leastStridePassed(step)) return false;
    if (step - last_step_ >= max_stride_) return true;
    return now_ns - last_done_ns_ >= time_per_cost_ * last_cost_ns_;
  }
  // The work done at the boundary ending `step`, begun at `start_ns` and ended at `end_ns`.
  void noteDone(std::uint32_t step, std::int64_t start_ns, std::int64_t end_ns) {
    done_yet_ = true;
    last_step_ = step;
    last_done_ns_ = end_ns;
    last_cost_ns_ = end_ns > start_ns ? end_ns - start_ns : 0;
  }
  // Whether the boundary ending `step` is at least the least stride past the last that did the
  // work (or none did yet): the cadence of work that is due whatever it cost.
  bool leastStridePassed(std::uint32_t step) const {
    return !done_yet_ || step - last_step_ >= min_stride_;
  }
  std::uint32_t maxStride() const { return max_stride_; }

 private:
  std::int64_t time_per_cost_;
  std::uint32_t min_stride_;
  std::uint32_t max_stride_;
  bool done_yet_ = false;
  std::uint32_t last_step_ = 0;
  std::int64_t last_done_ns_ = 0;
  std::int64_t last_cost_ns_ = 0;
};

inline CostBoundedSchedule residentSchedule() { return CostBoundedSchedule(1024, 1, 8); }
// The verdict's renewals: at the least stride (every 8 boundaries) while memory moves, as the cost
// allows while the boundaries since the last renewal look alike.
inline CostBoundedSchedule verdictSchedule() { return CostBoundedSchedule(512, 8, 64); }

}  // namespace memseal::detect
