// Capacity: peak memory against batch size (or sequence length). Least squares for a line and,
// from four points on, a parabola; a model is accepted only when every measured point lies within
// the tolerance of it and, fitted without the largest size, it predicts that size within the
// tolerance too: a peak whose moment moves with size (gradients at small batches, activations at
// large ones) bends once, and a curve through the bend extrapolates wildly. The prediction solves
// model(size) <= budget * (1 - margin) for the largest integer size. Three points fit any parabola
// exactly, so a curve needs a fourth.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "memseal/fit.h"
#include "track/memory_counters.h"

namespace memseal {

namespace {

struct Polynomial {
  double c[3] = {0, 0, 0};  // c0 + c1 x + c2 x^2
  double at(double x) const { return c[0] + x * (c[1] + x * c[2]); }
};

// Least squares of degree 1 or 2 through the normal equations, with x scaled to [0, 1] so that
// sizes in the thousands keep the system well conditioned.
Polynomial leastSquares(const std::vector<FitPoint>& points, int degree) {
  double scale = 0;
  for (const FitPoint& point : points) scale = std::max(scale, static_cast<double>(point.size));
  int n = degree + 1;
  double a[3][4] = {};
  for (const FitPoint& point : points) {
    double x = static_cast<double>(point.size) / scale;
    double powers[5] = {1, x, x * x, x * x * x, x * x * x * x};
    for (int row = 0; row < n; ++row) {
      for (int column = 0; column < n; ++column) a[row][column] += powers[row + column];
      a[row][n] += powers[row] * static_cast<double>(point.peak_bytes);
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int pivot = 0; pivot < n; ++pivot) {
    int best = pivot;
    for (int row = pivot + 1; row < n; ++row) {
      if (std::fabs(a[row][pivot]) > std::fabs(a[best][pivot])) best = row;
    }
    std::swap(a[pivot], a[best]);
    for (int row = 0; row < n; ++row) {
      if (row == pivot || a[pivot][pivot] == 0) continue;
      double factor = a[row][pivot] / a[pivot][pivot];
      for (int column = pivot; column <= n; ++column) a[row][column] -= factor * a[pivot][column];
    }
  }
  Polynomial fitted;
  double unscale = 1;
  for (int i = 0; i < n; ++i) {
    fitted.c[i] = a[i][i] != 0 ? a[i][n] / a[i][i] / unscale : 0;
    unscale *= scale;
  }
  return fitted;
}

double maxRelativeResidual(const Polynomial& model, const std::vector<FitPoint>& points) {
  double worst = 0;
  for (const FitPoint& point : points) {
    double measured = static_cast<double>(point.peak_bytes);
    double residual = std::fabs(model.at(static_cast<double>(point.size)) - measured);
    worst = std::max(worst, measured > 0 ? residual / measured : residual);
  }
  return worst;
}

// Fitted to all but the largest size, how far the model misses the largest (relative).
double holdoutError(const std::vector<FitPoint>& points, int degree) {
  std::vector<FitPoint> smaller(points.begin(), points.end() - 1);
  Polynomial model = leastSquares(smaller, degree);
  const FitPoint& largest = points.back();
  double measured = static_cast<double>(largest.peak_bytes);
  double residual = std::fabs(model.at(static_cast<double>(largest.size)) - measured);
  return measured > 0 ? residual / measured : residual;
}

Polynomial chosenModel(const FitReport& report) {
  Polynomial model;
  if (report.model == "linear") {
    model.c[0] = report.linear_intercept;
    model.c[1] = report.linear_slope;
  } else if (report.model == "quadratic") {
    model.c[0] = report.quadratic_c0;
    model.c[1] = report.quadratic_c1;
    model.c[2] = report.quadratic_c2;
  }
  return model;
}

// The largest integer size >= 1 whose predicted peak is at most `usable`, for a model that grows
// with size; nullopt when even size 1 does not fit, or nothing below 2^50 exceeds it.
std::optional<std::int64_t> largestFitting(const Polynomial& model, double usable) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 50;
  if (model.at(1) > usable) return std::nullopt;
  std::int64_t low = 1;
  std::int64_t high = 2;
  while (high < kLimit && model.at(static_cast<double>(high)) <= usable) {
    low = high;
    high *= 2;
  }
  if (high >= kLimit) return std::nullopt;
  while (high - low > 1) {
    std::int64_t middle = low + (high - low) / 2;
    if (model.at(static_cast<double>(middle)) <= usable) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

void predict(FitReport& report) {
  if (report.model == "none") return;
  if (!report.budget_bytes) {
    report.refusal = "no budget to predict against";
    return;
  }
  Polynomial model = chosenModel(report);
  // The model must grow with size beyond the measured points, or there is nothing to solve.
  double largest = static_cast<double>(report.points.back().size);
  if (model.at(largest * 2) <= model.at(largest)) {
    report.refusal = "the peak does not grow with size: memory does not limit it";
    return;
  }
  double usable = static_cast<double>(*report.budget_bytes) * (1.0 - report.margin);
  if (model.at(1) > usable) {
    report.refusal = "even size 1 is predicted above the budget less its margin";
    return;
  }
  std::optional<std::int64_t> size = largestFitting(model, usable);
  if (!size) {
    report.refusal = "the model stays under the budget beyond any sensible size";
    return;
  }
  report.predicted_max_size = *size;
  report.predicted_peak_bytes =
      static_cast<std::int64_t>(std::llround(model.at(static_cast<double>(*size))));
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
}

std::int64_t measurePeak(const std::function<void(std::int64_t, int)>& step, std::int64_t size,
                         std::uint32_t warmup_steps, int& step_index) {
  track::MemoryCounters& counters = track::cpuCounters();
  for (std::uint32_t i = 0; i < warmup_steps; ++i) {
    setStep(static_cast<std::uint32_t>(step_index));
    step(size, step_index++);
  }
  setStep(static_cast<std::uint32_t>(step_index));
  counters.resetPeak();
  step(size, step_index++);
  return counters.read("cpu").peak_bytes;
}

}  // namespace

std::optional<double> FitReport::predictPeak(std::int64_t size) const {
  if (model == "none") return std::nullopt;
  return chosenModel(*this).at(static_cast<double>(size));
}

FitReport fitPeaks(std::vector<FitPoint> points, const FitOptions& options) {
  checkOptions(options);
  std::sort(points.begin(), points.end(),
            [](const FitPoint& a, const FitPoint& b) { return a.size < b.size; });
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (points[i].size <= 0) throw std::invalid_argument("memseal fit: sizes must be positive");
    if (i > 0 && points[i].size == points[i - 1].size) {
      throw std::invalid_argument("memseal fit: size " + std::to_string(points[i].size) +
                                  " appears twice");
    }
  }
  FitReport report;
  report.points = points;
  report.tolerance = options.tolerance;
  report.margin = options.margin;
  report.budget_bytes = options.budget_bytes;
  report.budget_source = options.budget_bytes ? "api" : "";
  if (points.size() < 3) {
    report.refusal = "fewer than three sizes measured: refusing to extrapolate";
    if (points.size() >= 2) {
      Polynomial line = leastSquares(points, 1);
      report.linear_intercept = line.c[0];
      report.linear_slope = line.c[1];
    }
    return report;
  }
  Polynomial line = leastSquares(points, 1);
  report.linear_intercept = line.c[0];
  report.linear_slope = line.c[1];
  report.linear_max_residual = maxRelativeResidual(line, points);
  report.linear_holdout_error = holdoutError(points, 1);
  report.is_linear = report.linear_max_residual <= options.tolerance &&
                     report.linear_holdout_error <= options.tolerance;
  if (points.size() >= 4) {
    Polynomial curve = leastSquares(points, 2);
    report.has_quadratic = true;
    report.quadratic_c0 = curve.c[0];
    report.quadratic_c1 = curve.c[1];
    report.quadratic_c2 = curve.c[2];
    report.quadratic_max_residual = maxRelativeResidual(curve, points);
    report.quadratic_holdout_error = holdoutError(points, 2);
  }
  if (report.is_linear) {
    report.model = "linear";
  } else if (report.has_quadratic && report.quadratic_c2 > 0 &&
             report.quadratic_max_residual <= options.tolerance &&
             report.quadratic_holdout_error <= options.tolerance) {
    // Only a parabola that opens upward: one that bends down would promise unbounded room.
    report.model = "quadratic";
  } else {
    report.model = "none";
    report.refusal = points.size() < 4
                         ? "the peak is not linear in size, and three points fit any curve: "
                           "measure a fourth size"
                         : "neither a line nor a parabola describes the peaks, and predicts the "
                           "largest from the others, within the tolerance (does the peak's moment "
                           "change with size?): refusing to extrapolate";
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
  std::sort(sizes.begin(), sizes.end());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 0) throw std::invalid_argument("memseal fit: sizes must be positive");
    if (i > 0 && sizes[i] == sizes[i - 1]) {
      throw std::invalid_argument("memseal fit: size " + std::to_string(sizes[i]) +
                                  " appears twice");
    }
  }
  if (sizes.size() < 3) {
    throw std::invalid_argument(
        "memseal fit: at least three sizes are needed to extrapolate (got " +
        std::to_string(sizes.size()) + ")");
  }
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOff;
  defaults.observe_ops = OpWatching::off();
  defaults.record_tensor_metadata = false;
  Tracker tracker(options.tracker.resolved(defaults));
  tracker.start();
  FitOptions resolved = options;
  if (!resolved.budget_bytes) {
    std::int64_t available = availableMemoryBytes();
    if (available > 0) resolved.budget_bytes = available;
  }
  int step_index = 0;
  std::vector<FitPoint> points;
  for (std::int64_t size : sizes) {
    points.push_back({size, measurePeak(step, size, options.warmup_steps, step_index)});
  }
  FitReport report = fitPeaks(points, resolved);
  report.budget_source = options.budget_bytes ? "api" : "available memory";
  if (options.verify && report.predicted_max_size) {
    FitReport::Verification verification;
    verification.size = *report.predicted_max_size;
    verification.predicted_peak_bytes = *report.predicted_peak_bytes;
    try {
      verification.measured_peak_bytes =
          measurePeak(step, verification.size, options.warmup_steps, step_index);
      verification.relative_error =
          static_cast<double>(verification.measured_peak_bytes -
                              verification.predicted_peak_bytes) /
          static_cast<double>(std::max<std::int64_t>(1, verification.measured_peak_bytes));
      verification.within_budget = verification.measured_peak_bytes <= *report.budget_bytes;
    } catch (const std::exception& error) {
      verification.error = error.what();
    }
    report.verification = verification;
  }
  tracker.stop();
  return report;
}

std::optional<std::int64_t> parseByteSize(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (text.find('x') != std::string::npos || text.find('X') != std::string::npos) {
    return std::nullopt;  // strtod reads hexadecimal; sizes are decimal
  }
  double value = std::strtod(begin, &end);
  if (end == begin || errno != 0 || !(value > 0)) return std::nullopt;
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  double scale = 0;
  static const struct {
    const char* names[4];
    double scale;
  } kUnits[] = {
      {{"", "B", "b", nullptr}, 1.0},
      {{"K", "KiB", "k", "Ki"}, 1024.0},
      {{"M", "MiB", "m", "Mi"}, 1024.0 * 1024},
      {{"G", "GiB", "g", "Gi"}, 1024.0 * 1024 * 1024},
      {{"T", "TiB", "t", "Ti"}, 1024.0 * 1024 * 1024 * 1024},
      {{"kB", "KB", nullptr, nullptr}, 1e3},
      {{"MB", nullptr, nullptr, nullptr}, 1e6},
      {{"GB", nullptr, nullptr, nullptr}, 1e9},
      {{"TB", nullptr, nullptr, nullptr}, 1e12},
  };
  for (const auto& candidate : kUnits) {
    for (const char* name : candidate.names) {
      if (name != nullptr && unit == name) scale = candidate.scale;
    }
  }
  if (scale == 0) return std::nullopt;
  double bytes = value * scale;
  if (bytes >= 9.2e18 || bytes < 1) return std::nullopt;
  return static_cast<std::int64_t>(bytes);
}

}  // namespace memseal
