// The run's step samples as the whole-run rules read them: at most kMaxRunSamples of them, evenly
// spaced from the first step after warm-up, the last one always.
//
// A renewal of the verdict reads this series; reading it from the samples each time cost most of a
// renewal past a few thousand steps: one sample in up to 32 of a vector of 16,384 (768 KiB), each a
// cache line the program's own work had evicted since. The spacing is a power of two and starts
// at the range's first sample, so a later renewal keeps what an earlier one read and reads only the
// samples added since; when the spacing doubles, every other point is dropped, no sample read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::detect {

inline constexpr std::size_t kMaxRunSamples = 512;

// The samples of steps first..last (a contiguous range of `samples`, which are in step order),
// thinned; `recent` addresses the whole range, every sample, for rules over the latest steps.
struct RunSeries {
  const StepSample* recent = nullptr;
  std::size_t count = 0;  // samples in the range
  std::vector<std::uint32_t> steps;
  std::vector<std::int64_t> live;
  std::vector<std::int64_t> resident;
};

// The thinned points of one growing vector of samples, kept from one renewal to the next. The
// vector may only grow at its end, or be thinned in its older half (common::thinOlderHalf), which
// the cache notices and reads the range again.
class RunSeriesCache {
 public:
  RunSeries series(const std::vector<StepSample>& samples, std::uint32_t first_step,
                   std::uint32_t last_step);

 private:
  // Whether the points still describe `samples` from index `begin` (no thinning since).
  bool stillValid(const std::vector<StepSample>& samples, std::size_t begin) const;
  void rebuild(const std::vector<StepSample>& samples, std::size_t begin, std::size_t count,
               std::size_t stride);
  void widenTo(std::size_t stride);
  void keep(const StepSample& sample);  // one more point
  void keepFirst(std::size_t points);   // the first `points` points only

  std::size_t begin_ = 0;   // index of the range's first sample in the vector
  std::size_t stride_ = 0;  // 0: nothing kept yet
  std::uint32_t first_step_ = 0;
  // Samples at begin_ + i * stride_, i = 0, 1, ...: their steps and values.
  std::vector<std::uint32_t> steps_;
  std::vector<std::int64_t> live_;
  std::vector<std::int64_t> resident_;
};

// The spacing for `count` samples: the least power of two that leaves at most kMaxRunSamples
// points, the last sample included.
std::size_t runSeriesStride(std::size_t count);

}  // namespace memseal::detect
