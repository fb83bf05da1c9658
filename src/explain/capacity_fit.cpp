// Capacity: peak memory against batch size (or sequence length). The step's peak is the highest
// of its phases' peaks (forward, backward, the optimizer's update), and the phase holding it may
// change with size: a line through the step's peaks bends where it changes, and extrapolates far
// past the bend. So each phase is fitted apart (explain/fit_models.h: a line, or from four points
// an upward parabola, accepted only when it describes every point and predicts the largest from
// the others within the tolerance), and the prediction is the largest integer size at which the
// highest phase model stays under budget * (1 - margin). Points without phases get the step's own
// model. With verify, the predicted size is measured; a miss starts a search by measurement.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "common/text.h"
#include "explain/fit_models.h"
#include "explain/fit_search.h"
#include "explain/phase_names.h"
#include "memseal/fit.h"
#include "track/device_events.h"
#include "track/memory_counters.h"

namespace memseal {

namespace {

using explain::PeakSeries;
using explain::Polynomial;
using explain::SeriesFit;

Polynomial polynomialOf(const PhaseModel& phase) {
  Polynomial model;
  model.c[0] = phase.c0;
  model.c[1] = phase.c1;
  model.c[2] = phase.c2;
  return model;
}

// The measured points as a series to fit: each size's peak as `peakOf` reads it, against the
// step's peak (the scale residuals are relative to).
template <typename PeakOf>
PeakSeries seriesOf(const std::vector<FitPoint>& points, PeakOf peakOf) {
  PeakSeries series;
  for (const FitPoint& point : points) {
    series.sizes.push_back(static_cast<double>(point.size));
    series.peaks.push_back(static_cast<double>(peakOf(point)));
    series.scales.push_back(static_cast<double>(point.peak_bytes));
  }
  return series;
}

// The step's peak at `size` under the report's model; the phase that holds it in `phase_index`
// (-1 for a model of the step alone).
double modelPeak(const FitReport& report, double size, int* phase_index = nullptr) {
  if (phase_index != nullptr) *phase_index = -1;
  if (report.model == "phases") {
    double highest = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < report.phases.size(); ++i) {
      double peak = polynomialOf(report.phases[i]).at(size);
      if (peak > highest) {
        highest = peak;
        if (phase_index != nullptr) *phase_index = static_cast<int>(i);
      }
    }
    return highest;
  }
  Polynomial model;
  if (report.model == "linear") {
    model.c[0] = report.linear_intercept;
    model.c[1] = report.linear_slope;
  } else if (report.model == "quadratic") {
    model.c[0] = report.quadratic_c0;
    model.c[1] = report.quadratic_c1;
    model.c[2] = report.quadratic_c2;
  }
  return model.at(size);
}

int limitingPhaseAt(const FitReport& report, std::int64_t size) {
  int index = -1;
  modelPeak(report, static_cast<double>(size), &index);
  return index;
}

// Where, between the smallest measured size and the predicted one, the phase holding the peak
// changes. The highest of lines changes phase in one direction only (to steeper lines), so each
// change is found by bisection.
void findPhaseChanges(FitReport& report) {
  if (report.model != "phases" || !report.predicted_max_size) return;
  std::int64_t from = report.points.front().size;
  std::int64_t to = std::max(from, *report.predicted_max_size);
  int current = limitingPhaseAt(report, from);
  report.phase_changes.push_back({from, report.phases[static_cast<std::size_t>(current)].phase});
  while (report.phase_changes.size() <= report.phases.size() &&
         limitingPhaseAt(report, to) != current) {
    std::int64_t low = from;  // held by `current`
    std::int64_t high = to;   // held by another
    while (high - low > 1) {
      std::int64_t middle = low + (high - low) / 2;
      if (limitingPhaseAt(report, middle) == current) {
        low = middle;
      } else {
        high = middle;
      }
    }
    from = high;
    current = limitingPhaseAt(report, high);
    report.phase_changes.push_back({high, report.phases[static_cast<std::size_t>(current)].phase});
  }
  report.limiting_phase =
      report.phases[static_cast<std::size_t>(limitingPhaseAt(report, to))].phase;
}

void predict(FitReport& report) {
  if (report.model == "none") return;
  if (!report.budget_bytes) {
    report.refusal = "no budget to predict against";
    return;
  }
  auto peak = [&report](double size) { return modelPeak(report, size); };
  // The model must grow with size beyond the measured points, or there is nothing to solve. Far
  // beyond them: a flat phase may hold the peak for a while before a growing one passes it.
  double largest = static_cast<double>(report.points.back().size);
  if (peak(std::ldexp(1.0, 50)) <= peak(largest)) {
    report.refusal = "the peak does not grow with size: memory does not limit it";
    return;
  }
  double usable = static_cast<double>(*report.budget_bytes) * (1.0 - report.margin);
  if (peak(1) > usable) {
    report.refusal = "even size 1 is predicted above the budget less its margin";
    return;
  }
  std::optional<std::int64_t> size = explain::largestFitting(peak, usable);
  if (!size) {
    report.refusal = "the model stays under the budget beyond any sensible size";
    return;
  }
  report.predicted_max_size = *size;
  report.predicted_peak_bytes =
      static_cast<std::int64_t>(std::llround(peak(static_cast<double>(*size))));
  report.extrapolation = static_cast<double>(*size) / largest;
  findPhaseChanges(report);
}

// The phases every point names, in the same order; empty when they differ or some point has none.
std::vector<std::string> commonPhases(const std::vector<FitPoint>& points) {
  std::vector<std::string> names;
  for (const PhasePeak& phase : points.front().phases) names.push_back(phase.phase);
  for (const FitPoint& point : points) {
    if (point.phases.size() != names.size()) return {};
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (point.phases[i].phase != names[i]) return {};
    }
  }
  return names;
}

// Each phase's model, in the points' phase order; empty when they do not share their phases.
std::vector<PhaseModel> phaseModels(const std::vector<FitPoint>& points, double tolerance) {
  std::vector<std::string> names = commonPhases(points);
  std::vector<PhaseModel> models;
  if (names.size() < 2) return models;
  for (std::size_t i = 0; i < names.size(); ++i) {
    PeakSeries series =
        seriesOf(points, [i](const FitPoint& point) { return point.phases[i].peak_bytes; });
    SeriesFit fit = explain::fitSeries(series, tolerance);
    PhaseModel phase;
    phase.phase = names[i];
    phase.model = fit.model;
    Polynomial chosen = fit.model == "none" ? fit.line : fit.chosen();
    phase.c0 = chosen.c[0];
    phase.c1 = chosen.c[1];
    phase.c2 = chosen.c[2];
    bool curved = fit.model == "quadratic";
    phase.max_residual = curved ? fit.curve_residual : fit.line_residual;
    phase.holdout_error = curved ? fit.curve_holdout : fit.line_holdout;
    models.push_back(phase);
  }
  return models;
}

bool allDescribed(const std::vector<PhaseModel>& models) {
  return !models.empty() && std::all_of(models.begin(), models.end(), [](const PhaseModel& phase) {
    return phase.model != "none";
  });
}

// "phases" becomes the model when there are two or more phases and every one has a model (one
// without would leave the highest of them unknown past the points). Backward's nodes are phases
// of their own where every size ran the same nodes in the same order (one graph, one thread) and
// each has a model; otherwise backward is one phase.
void fitPhases(FitReport& report, double tolerance) {
  std::vector<PhaseModel> models = phaseModels(report.points, tolerance);
  if (!allDescribed(models)) {
    std::vector<FitPoint> coarse = report.points;
    for (FitPoint& point : coarse) point.phases = explain::coarsePhases(point.phases);
    std::vector<PhaseModel> coarse_models = phaseModels(coarse, tolerance);
    if (!coarse_models.empty() && (models.empty() || allDescribed(coarse_models))) {
      report.points = std::move(coarse);
      models = std::move(coarse_models);
    }
  }
  report.phases = std::move(models);
  if (allDescribed(report.phases)) report.model = "phases";
}

void checkOptions(const FitOptions& options) {
  if (!(options.margin >= 0 && options.margin < 1)) {
    throw std::invalid_argument("memseal fit: margin must be in [0, 1)");
  }
  if (!(options.tolerance > 0 && options.tolerance < 1)) {
    throw std::invalid_argument("memseal fit: tolerance must be in (0, 1)");
  }
  if (options.budget_bytes && *options.budget_bytes <= 0) {
    throw std::invalid_argument("memseal fit: the budget must be positive");
  }
  if (options.device < -1) {
    throw std::invalid_argument("memseal fit: device must be -1 (host memory) or a CUDA index");
  }
}

void checkSizes(std::vector<std::int64_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 0) throw std::invalid_argument("memseal fit: sizes must be positive");
    if (i > 0 && sizes[i] == sizes[i - 1]) {
      throw std::invalid_argument("memseal fit: size " + std::to_string(sizes[i]) +
                                  " appears twice");
    }
  }
}

}  // namespace

std::optional<double> FitReport::predictPeak(std::int64_t size) const {
  if (model == "none") return std::nullopt;
  return modelPeak(*this, static_cast<double>(size));
}

std::optional<std::int64_t> FitReport::largestSize() const {
  if (verification && verification->missed) return verification->measured_max_size;
  return predicted_max_size;
}

FitReport fitPeaks(std::vector<FitPoint> points, const FitOptions& options) {
  checkOptions(options);
  std::sort(points.begin(), points.end(),
            [](const FitPoint& a, const FitPoint& b) { return a.size < b.size; });
  std::vector<std::int64_t> sizes;
  for (const FitPoint& point : points) sizes.push_back(point.size);
  checkSizes(sizes);
  FitReport report;
  report.points = points;
  report.tolerance = options.tolerance;
  report.margin = options.margin;
  report.budget_bytes = options.budget_bytes;
  report.budget_source = options.budget_bytes ? "api" : "";
  PeakSeries series = seriesOf(points, [](const FitPoint& point) { return point.peak_bytes; });
  SeriesFit fit = explain::fitSeries(series, options.tolerance);
  report.linear_intercept = fit.line.c[0];
  report.linear_slope = fit.line.c[1];
  if (points.size() < 3) {
    report.refusal = "fewer than three sizes measured: refusing to extrapolate";
    return report;
  }
  report.linear_max_residual = fit.line_residual;
  report.linear_holdout_error = fit.line_holdout;
  report.is_linear = fit.model == "linear";
  report.has_quadratic = fit.has_curve;
  report.quadratic_c0 = fit.curve.c[0];
  report.quadratic_c1 = fit.curve.c[1];
  report.quadratic_c2 = fit.curve.c[2];
  report.quadratic_max_residual = fit.curve_residual;
  report.quadratic_holdout_error = fit.curve_holdout;
  report.model = fit.model;
  fitPhases(report, options.tolerance);
  if (report.model == "none") {
    report.refusal = points.size() < 4
                         ? "the peak is not linear in size, and three points fit any curve: "
                           "measure a fourth size"
                         : "neither a line nor a parabola describes the peaks (of the step or of "
                           "each of its phases), and predicts the largest from the others, within "
                           "the tolerance: refusing to extrapolate";
    return report;
  }
  predict(report);
  return report;
}

std::int64_t availableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      return kib * 1024 + track::cpuCounters().read("cpu").live_bytes;
    }
  }
  return 0;
}

FitReport fitCapacity(const std::function<void(std::int64_t, int)>& step,
                      const FitOptions& options) {
  if (!step) throw std::invalid_argument("memseal fit: no step function");
  checkOptions(options);
  std::vector<std::int64_t> sizes = options.sizes;
  checkSizes(sizes);
  std::sort(sizes.begin(), sizes.end());
  if (sizes.size() < 3) {
    throw std::invalid_argument(
        "memseal fit: at least three sizes are needed to extrapolate (got " +
        std::to_string(sizes.size()) + ")");
  }
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOff;
  TrackerOptions resolved_tracker = options.tracker.resolved(defaults);
  // The phases come from the ops that record autograd history and backward's nodes, which only
  // watched ops with their outputs read tell.
  resolved_tracker.watch_ops = OpWatching::everyStep();
  resolved_tracker.record_tensor_metadata = true;
  Tracker tracker(resolved_tracker);
  tracker.start();
  FitOptions resolved = options;
  const bool on_device = options.device >= 0;
  const std::string memory = on_device ? "cuda:" + std::to_string(options.device) : "host";
  if (!resolved.budget_bytes && !on_device) {
    std::int64_t available = availableMemoryBytes();
    if (available > 0) resolved.budget_bytes = available;
  }
  explain::SizedStepRunner runner(step, options.warmup_steps, options.device);
  std::vector<FitPoint> points;
  for (std::int64_t size : sizes) points.push_back(runner.measure(size));
  if (on_device) {
    if (std::all_of(points.begin(), points.end(),
                    [](const FitPoint& point) { return point.peak_bytes == 0; })) {
      throw std::invalid_argument("memseal fit: the step reserved no memory on " + memory +
                                  " (does it run there, and is CUDA initialised?)");
    }
    // Known once the allocator's hook is attached, which the steps' first CUDA use allows.
    std::uint64_t device_bytes = track::deviceMemoryForProcess(options.device);
    if (!resolved.budget_bytes && device_bytes > 0) {
      resolved.budget_bytes = static_cast<std::int64_t>(device_bytes);
    }
  }
  FitReport report = fitPeaks(points, resolved);
  report.memory = memory;
  report.budget_source =
      options.budget_bytes ? "api" : (on_device ? "device memory" : "available memory");
  if (options.verify && report.predicted_max_size) {
    report.verification = explain::verifyPrediction(runner, report, options.max_search_sizes);
  }
  tracker.stop();
  return report;
}

std::optional<std::int64_t> parseByteSize(const std::string& text) {
  return common::parseByteSize(text);
}

std::optional<int> parseFitMemory(const std::string& memory) {
  if (memory == "host") return -1;
  return common::parseCudaDeviceName(memory);
}

}  // namespace memseal
