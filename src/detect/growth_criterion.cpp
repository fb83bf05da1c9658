// Thresholds are chosen so that a single leaked scalar per step is found within 4 steps after
// warm-up, while bounded caches smaller than 3/4 of the observed steps are never flagged.
#include "detect/growth_criterion.h"

#include <algorithm>

namespace memseal::detect {

namespace {

// The extreme of each of `parts` equal segments of `values`: the largest when `largest`, else the
// smallest.
std::vector<std::int64_t> segmentExtremes(const std::vector<std::int64_t>& values,
                                          std::size_t parts, bool largest) {
  std::vector<std::int64_t> extremes;
  for (std::size_t part = 0; part < parts; ++part) {
    auto begin = values.begin() + static_cast<std::ptrdiff_t>(values.size() * part / parts);
    auto end = values.begin() + static_cast<std::ptrdiff_t>(values.size() * (part + 1) / parts);
    extremes.push_back(largest ? *std::max_element(begin, end) : *std::min_element(begin, end));
  }
  return extremes;
}

std::vector<std::int64_t> segmentMaxima(const std::vector<std::int64_t>& values,
                                        std::size_t parts) {
  return segmentExtremes(values, parts, true);
}

std::vector<std::int64_t> segmentMinima(const std::vector<std::int64_t>& values,
                                        std::size_t parts) {
  return segmentExtremes(values, parts, false);
}

}  // namespace

bool survivorsKeepGrowing(const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                          std::uint32_t last_step) {
  if (last_step < first_step) return false;
  std::uint32_t observed = last_step - first_step + 1;
  if (observed < kMinJudgedSteps) return false;
  std::uint32_t needed = std::max<std::uint32_t>(3, (observed * 3 + 3) / 4);
  if (alive_steps.size() < needed) return false;
  std::uint32_t quarter = std::max<std::uint32_t>(1, observed / 4);
  bool early = alive_steps.front() < first_step + quarter;
  bool recent = alive_steps.back() + quarter > last_step;
  return early && recent;
}

bool survivorsSpanTheRun(const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                         std::uint32_t last_step) {
  if (last_step < first_step) return false;
  std::uint32_t observed = last_step - first_step + 1;
  if (observed < 8) return false;
  std::uint32_t needed = std::max<std::uint32_t>(3, (observed + 3) / 4);
  if (alive_steps.size() < needed) return false;
  bool quarter_seen[4] = {false, false, false, false};
  for (std::uint32_t step : alive_steps) {
    if (step < first_step || step > last_step) continue;
    quarter_seen[static_cast<std::uint64_t>(step - first_step) * 4 / observed] = true;
  }
  return quarter_seen[0] && quarter_seen[1] && quarter_seen[2] && quarter_seen[3];
}

double steadyTensorGrowthPerStep(const std::vector<std::uint32_t>& steps,
                                 const std::vector<std::int64_t>& values) {
  if (values.size() < 8 || steps.size() != values.size()) return 0;
  std::vector<std::int64_t> maxima = segmentMaxima(values, 4);
  for (std::size_t i = 1; i < maxima.size(); ++i) {
    if (maxima[i] <= maxima[i - 1]) return 0;
  }
  std::vector<std::int64_t> minima = segmentMinima(values, 4);
  std::int64_t growth = maxima.back() - *std::min_element(minima.begin(), minima.end());
  if (maxima.back() - values.back() > growth / 8) return 0;  // fell back at the end
  // What is held rises from below too: another thread's work in flight at the boundaries (a second
  // server worker mid-request) lifts some samples and not others, and its peaks can rise by
  // chance while the level it returns to stays where it was.
  if ((minima.back() - minima.front()) * 4 < maxima.back() - maxima.front()) return 0;
  return std::max(0.0, slopeOf(steps, values));
}

double slopeOf(const std::vector<std::uint32_t>& steps, const std::vector<std::int64_t>& values) {
  std::size_t n = std::min(steps.size(), values.size());
  if (n < 2) return 0;
  double mean_x = 0;
  double mean_y = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mean_x += steps[i];
    mean_y += static_cast<double>(values[i]);
  }
  mean_x /= static_cast<double>(n);
  mean_y /= static_cast<double>(n);
  double numerator = 0;
  double denominator = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double dx = steps[i] - mean_x;
    numerator += dx * (static_cast<double>(values[i]) - mean_y);
    denominator += dx * dx;
  }
  return denominator > 0 ? numerator / denominator : 0;
}

double slopeWithoutOneJump(const std::vector<std::uint32_t>& steps,
                           const std::vector<std::int64_t>& values) {
  std::size_t n = std::min(steps.size(), values.size());
  std::size_t jump_at = 0;
  std::int64_t largest_rise = 0;
  std::int64_t all_rises = 0;
  std::int64_t rises = 0;
  for (std::size_t i = 1; i < n; ++i) {
    std::int64_t rise = values[i] - values[i - 1];
    if (rise <= 0) continue;
    all_rises += rise;
    ++rises;
    if (rise > largest_rise) {
      largest_rise = rise;
      jump_at = i;
    }
  }
  if (largest_rise * 2 <= all_rises) return slopeOf(steps, values);
  // The jump's interval keeps what the other rises add on average: the steps went on beside it.
  std::int64_t usual_rise = rises > 1 ? (all_rises - largest_rise) / (rises - 1) : 0;
  std::vector<std::int64_t> without(values.begin(),
                                    values.begin() + static_cast<std::ptrdiff_t>(n));
  for (std::size_t i = jump_at; i < n; ++i) without[i] -= largest_rise - usual_rise;
  return slopeOf(steps, without);
}

double steadyGrowthPerStep(const std::vector<std::int64_t>& samples, double min_bytes_per_step) {
  std::vector<std::uint32_t> steps(samples.size());
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<std::uint32_t>(i);
  return steadyGrowthPerStep(steps, samples, min_bytes_per_step);
}

double steadyGrowthPerStep(const std::vector<std::uint32_t>& steps,
                           const std::vector<std::int64_t>& samples, double min_bytes_per_step) {
  if (samples.size() < 6 || steps.size() != samples.size()) return 0;
  std::size_t rises = 0;
  for (std::size_t i = 1; i < samples.size(); ++i) rises += samples[i] > samples[i - 1] ? 1 : 0;
  if (rises * 10 < (samples.size() - 1) * 6) return 0;  // rose in fewer than 60% of the samples
  double slope = slopeOf(steps, samples);
  if (slope < min_bytes_per_step) return 0;
  auto half = static_cast<std::ptrdiff_t>(samples.size() / 2);
  // Levelling off shows as a flat second half.
  double second = slopeOf(std::vector<std::uint32_t>(steps.begin() + half, steps.end()),
                          std::vector<std::int64_t>(samples.begin() + half, samples.end()));
  if (second < slope / 2) return 0;
  return slope;
}

double unboundedGrowthPerStep(const std::vector<std::uint32_t>& steps,
                              const std::vector<std::int64_t>& values, double min_total_bytes) {
  constexpr std::uint32_t kMinSteps = 200;
  constexpr std::size_t kSegments = 8;
  if (values.size() < 2 * kSegments || steps.size() != values.size()) return 0;
  if (steps.back() - steps.front() + 1 < kMinSteps) return 0;
  std::vector<std::int64_t> maxima = segmentMaxima(values, kSegments);
  std::size_t climbs = 0;
  for (std::size_t i = 1; i < kSegments; ++i) climbs += maxima[i] > maxima[i - 1] ? 1 : 0;
  if (climbs < kSegments - 2) return 0;
  if (maxima[kSegments - 1] <= maxima[kSegments - 2] ||
      maxima[kSegments - 2] <= maxima[kSegments - 3]) {
    return 0;  // levelled off
  }
  // What one step added (a program that loads a data set or builds a table once, late in the run;
  // the last sample, taken as the program ends) is no unbounded growth: the total must be reached
  // without the largest single rise.
  std::int64_t largest_rise = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    largest_rise = std::max(largest_rise, values[i] - values[i - 1]);
  }
  if (static_cast<double>(maxima.back() - maxima.front() - largest_rise) < min_total_bytes) {
    return 0;
  }
  std::size_t half = values.size() / 2;
  auto half_slope = [&](std::size_t begin, std::size_t end) {
    return slopeOf(std::vector<std::uint32_t>(steps.begin() + static_cast<std::ptrdiff_t>(begin),
                                              steps.begin() + static_cast<std::ptrdiff_t>(end)),
                   std::vector<std::int64_t>(values.begin() + static_cast<std::ptrdiff_t>(begin),
                                             values.begin() + static_cast<std::ptrdiff_t>(end)));
  };
  double first = half_slope(0, half);
  double second = half_slope(half, values.size());
  if (second <= 0 || (first > 0 && second < first / 3)) return 0;
  return std::max(0.0, slopeOf(steps, values));
}

}  // namespace memseal::detect
