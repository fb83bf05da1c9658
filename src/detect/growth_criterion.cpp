// Thresholds are chosen so that a single leaked scalar per step is found within 4 steps after
// warm-up, while bounded caches smaller than 3/4 of the observed steps are never flagged.
#include "detect/growth_criterion.h"

#include <algorithm>

namespace memseal::detect {

bool survivorsKeepGrowing(const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                          std::uint32_t last_step) {
  if (last_step < first_step) return false;
  std::uint32_t observed = last_step - first_step + 1;
  if (observed < 4) return false;
  std::uint32_t needed = std::max<std::uint32_t>(3, (observed * 3 + 3) / 4);
  if (alive_steps.size() < needed) return false;
  std::uint32_t quarter = std::max<std::uint32_t>(1, observed / 4);
  bool early = alive_steps.front() < first_step + quarter;
  bool recent = alive_steps.back() + quarter > last_step;
  return early && recent;
}

double slopePerStep(const std::vector<std::int64_t>& samples) {
  std::size_t n = samples.size();
  if (n < 2) return 0;
  double mean_x = static_cast<double>(n - 1) / 2.0;
  double mean_y = 0;
  for (std::int64_t y : samples) mean_y += static_cast<double>(y);
  mean_y /= static_cast<double>(n);
  double numerator = 0;
  double denominator = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double dx = static_cast<double>(i) - mean_x;
    numerator += dx * (static_cast<double>(samples[i]) - mean_y);
    denominator += dx * dx;
  }
  return numerator / denominator;
}

double steadyGrowthPerStep(const std::vector<std::int64_t>& samples, double min_bytes_per_step) {
  if (samples.size() < 6) return 0;
  std::size_t rises = 0;
  for (std::size_t i = 1; i < samples.size(); ++i) rises += samples[i] > samples[i - 1] ? 1 : 0;
  if (rises * 10 < (samples.size() - 1) * 6) return 0;  // rose in fewer than 60% of the steps
  double slope = slopePerStep(samples);
  if (slope < min_bytes_per_step) return 0;
  std::size_t half = samples.size() / 2;
  std::vector<std::int64_t> second(samples.begin() + static_cast<std::ptrdiff_t>(half),
                                   samples.end());
  // Levelling off shows as a flat second half.
  if (slopePerStep(second) < slope / 2) return 0;
  return slope;
}

}  // namespace memseal::detect
