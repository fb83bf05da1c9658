// The search keeps two bounds: the largest size measured to fit (a fitted point, or a searched
// one) and the smallest measured not to (over the budget less its margin, or failing). With no
// failing size yet it steps up, each step aimed by the line through the two largest fitting
// measurements at the usable budget and at most doubling, so it does not leap into an
// out-of-memory; once both bounds exist it bisects until they are within 1% (or adjacent).
#include "explain/fit_search.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>

#include "explain/device_step_watch.h"
#include "explain/phase_meter.h"
#include "memseal/tracker.h"
#include "track/device_events.h"

namespace memseal::explain {

namespace {

// Allocator events kept of a measured step on a device (56 bytes each): a large model's training
// step makes a few thousand.
constexpr std::size_t kDeviceEventsPerStep = std::size_t{1} << 18;

}  // namespace

void SizedStepRunner::warmUp(std::int64_t size) {
  for (std::uint32_t i = 0; i < warmup_steps_; ++i) {
    setStep(static_cast<std::uint32_t>(step_index_));
    step_(size, step_index_++);
  }
  setStep(static_cast<std::uint32_t>(step_index_));
}

FitPoint SizedStepRunner::measure(std::int64_t size) {
  if (device_ >= 0) return measureDevice(size);
  warmUp(size);
  FitPoint point;
  point.size = size;
  PhaseMeter phases;  // resets the peak: the measured step's own
  step_(size, step_index_++);
  point.phases = phases.finish();
  point.peak_bytes = phases.stepPeak();
  return point;
}

FitPoint SizedStepRunner::measureDevice(std::int64_t size) {
  // What the last size cached would serve this one's requests, or hold memory this size's
  // blocks cannot use: each size starts from an empty cache, as a run of that size alone does.
  track::releaseCachedDeviceMemory();
  warmUp(size);
  FitPoint point;
  point.size = size;
  DeviceStepWatch watch(static_cast<std::uint32_t>(step_index_), kDeviceEventsPerStep);
  step_(size, step_index_++);
  for (const DeviceStepEvents& device : watch.stop()) {
    if (device.device != device_) continue;
    point.peak_bytes = deviceStepPeak(device, {}, nullptr).reserved_peak_bytes;
  }
  return point;
}

namespace {

struct SearchState {
  double usable = 0;
  // Fitting measurements, by size: the step-up aims with the two largest.
  std::vector<FitReport::Measurement> fitting;
  std::optional<std::int64_t> failing;
};

FitReport::Measurement measureOne(SizedStepRunner& runner, std::int64_t size, double usable) {
  FitReport::Measurement measurement;
  measurement.size = size;
  try {
    measurement.peak_bytes = runner.measure(size).peak_bytes;
    measurement.fits = static_cast<double>(measurement.peak_bytes) <= usable;
  } catch (const std::exception& error) {
    measurement.error = error.what();
  }
  return measurement;
}

void record(SearchState& state, const FitReport::Measurement& measurement) {
  if (measurement.fits) {
    state.fitting.push_back(measurement);
    std::sort(state.fitting.begin(), state.fitting.end(),
              [](const auto& a, const auto& b) { return a.size < b.size; });
  } else if (!state.failing || measurement.size < *state.failing) {
    state.failing = measurement.size;
  }
}

// The next size to measure; nullopt when the bounds have met.
std::optional<std::int64_t> nextSize(const SearchState& state) {
  if (state.fitting.empty()) {
    // Nothing measured fits: halve the failing size (the fitted points fit by construction, so this
    // is only reached when the budget was smaller than every measured peak).
    if (!state.failing || *state.failing <= 1) return std::nullopt;
    return *state.failing / 2;
  }
  const FitReport::Measurement& best = state.fitting.back();
  if (state.failing) {
    std::int64_t low = best.size;
    std::int64_t high = *state.failing;
    if (high - low <= std::max<std::int64_t>(1, low / 100)) return std::nullopt;
    return low + (high - low) / 2;
  }
  std::int64_t next = best.size * 2;
  if (state.fitting.size() >= 2) {
    const FitReport::Measurement& before = state.fitting[state.fitting.size() - 2];
    double slope = static_cast<double>(best.peak_bytes - before.peak_bytes) /
                   static_cast<double>(best.size - before.size);
    if (slope > 0) {
      double aimed = static_cast<double>(best.size) +
                     (state.usable - static_cast<double>(best.peak_bytes)) / slope;
      if (aimed < static_cast<double>(next)) next = static_cast<std::int64_t>(aimed);
    }
  }
  return std::max(next, best.size + 1);
}

}  // namespace

FitReport::Verification verifyPrediction(SizedStepRunner& runner, const FitReport& report,
                                         std::uint32_t max_sizes) {
  FitReport::Verification verification;
  SearchState state;
  state.usable = static_cast<double>(*report.budget_bytes) * (1.0 - report.margin);
  verification.size = *report.predicted_max_size;
  verification.predicted_peak_bytes = *report.predicted_peak_bytes;
  FitReport::Measurement first = measureOne(runner, verification.size, state.usable);
  verification.error = first.error;
  verification.measured_peak_bytes = first.peak_bytes;
  if (first.error.empty()) {
    verification.relative_error =
        static_cast<double>(first.peak_bytes - verification.predicted_peak_bytes) /
        static_cast<double>(std::max<std::int64_t>(1, first.peak_bytes));
    verification.within_budget = first.peak_bytes <= *report.budget_bytes;
  }
  verification.missed = !first.error.empty() || !verification.within_budget ||
                        std::fabs(verification.relative_error) > report.tolerance;
  if (!verification.missed) return verification;
  for (const FitPoint& point : report.points) {
    record(state, {point.size, point.peak_bytes,
                   static_cast<double>(point.peak_bytes) <= state.usable, ""});
  }
  record(state, first);
  for (std::uint32_t i = 0; i < max_sizes; ++i) {
    std::optional<std::int64_t> size = nextSize(state);
    if (!size) break;
    FitReport::Measurement measurement = measureOne(runner, *size, state.usable);
    verification.searched.push_back(measurement);
    record(state, measurement);
  }
  verification.smallest_failing_size = state.failing;
  if (!state.fitting.empty()) {
    verification.measured_max_size = state.fitting.back().size;
    verification.measured_max_peak_bytes = state.fitting.back().peak_bytes;
    verification.model_miss =
        static_cast<double>(*report.predicted_max_size - state.fitting.back().size) /
        static_cast<double>(state.fitting.back().size);
  }
  return verification;
}

}  // namespace memseal::explain
