#include "detect/run_series.h"

#include <algorithm>

namespace memseal::detect {

std::size_t runSeriesStride(std::size_t count) {
  // The grid's points, ceil(count / stride), leave room for the last sample off the grid.
  std::size_t stride = 1;
  while ((count + stride - 1) / stride > kMaxRunSamples - 1) stride *= 2;
  return stride;
}

bool RunSeriesCache::stillValid(const std::vector<StepSample>& samples, std::size_t begin) const {
  if (stride_ == 0 || begin != begin_ || steps_.empty()) return false;
  // Steps only increase: the last point's sample still at its index means nothing before it moved
  // (thinning removes samples from the start of the vector onwards).
  std::size_t last_point = begin_ + (steps_.size() - 1) * stride_;
  return last_point < samples.size() && samples[last_point].step == steps_.back() &&
         samples[begin_].step == steps_.front();
}

void RunSeriesCache::rebuild(const std::vector<StepSample>& samples, std::size_t begin,
                             std::size_t count, std::size_t stride) {
  begin_ = begin;
  stride_ = stride;
  keepFirst(0);
  for (std::size_t i = 0; i < count; i += stride) keep(samples[begin + i]);
}

void RunSeriesCache::keep(const StepSample& sample) {
  steps_.push_back(sample.step);
  live_.push_back(sample.live_bytes);
  resident_.push_back(sample.resident_bytes);
}

void RunSeriesCache::keepFirst(std::size_t points) {
  steps_.resize(points);
  live_.resize(points);
  resident_.resize(points);
}

void RunSeriesCache::widenTo(std::size_t stride) {
  // A power of two times the old spacing: the points on the new grid are every ratio-th one.
  std::size_t ratio = stride / stride_;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < steps_.size(); i += ratio, ++kept) {
    steps_[kept] = steps_[i];
    live_[kept] = live_[i];
    resident_[kept] = resident_[i];
  }
  keepFirst(kept);
  stride_ = stride;
}

RunSeries RunSeriesCache::series(const std::vector<StepSample>& samples, std::uint32_t first_step,
                                 std::uint32_t last_step) {
  auto by_step = [](const StepSample& sample, std::uint32_t step) { return sample.step < step; };
  // Where the range begins: where it began before when that is still its first sample (two reads
  // rather than a binary search over the whole vector).
  std::size_t begin = begin_;
  bool same_begin = stride_ != 0 && first_step == first_step_ && begin < samples.size() &&
                    samples[begin].step >= first_step &&
                    (begin == 0 || samples[begin - 1].step < first_step);
  if (!same_begin) {
    begin = static_cast<std::size_t>(
        std::lower_bound(samples.begin(), samples.end(), first_step, by_step) - samples.begin());
  }
  auto end = std::upper_bound(
      samples.begin() + static_cast<std::ptrdiff_t>(begin), samples.end(), last_step,
      [](std::uint32_t step, const StepSample& sample) { return step < sample.step; });
  RunSeries series;
  series.count = static_cast<std::size_t>(end - samples.begin()) - begin;
  series.recent = samples.data() + begin;
  if (series.count == 0) return series;
  std::size_t stride = runSeriesStride(series.count);
  if (!stillValid(samples, begin) || stride < stride_) {
    rebuild(samples, begin, series.count, stride);
  } else {
    if (stride > stride_) widenTo(stride);
    // The points past those kept, up to the range's end (a range cut shorter drops points).
    std::size_t points = (series.count + stride_ - 1) / stride_;
    if (points < steps_.size()) keepFirst(points);
    for (std::size_t i = steps_.size() * stride_; i < series.count; i += stride_) {
      keep(samples[begin + i]);
    }
  }
  first_step_ = first_step;
  series.steps = steps_;
  series.live = live_;
  series.resident = resident_;
  if ((series.count - 1) % stride_ != 0) {  // the last sample, off the grid
    const StepSample& last = series.recent[series.count - 1];
    series.steps.push_back(last.step);
    series.live.push_back(last.live_bytes);
    series.resident.push_back(last.resident_bytes);
  }
  return series;
}

}  // namespace memseal::detect
