// Least squares through the normal equations, with sizes scaled to [0, 1] so that sizes in the
// thousands keep the system well conditioned.
#include "explain/fit_models.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace memseal::explain {

namespace {

Polynomial leastSquares(const std::vector<double>& sizes, const std::vector<double>& peaks,
                        std::size_t count, int degree) {
  double scale = 0;
  for (std::size_t i = 0; i < count; ++i) scale = std::max(scale, sizes[i]);
  if (scale <= 0) scale = 1;
  int n = degree + 1;
  double a[3][4] = {};
  for (std::size_t i = 0; i < count; ++i) {
    double x = sizes[i] / scale;
    double powers[5] = {1, x, x * x, x * x * x, x * x * x * x};
    for (int row = 0; row < n; ++row) {
      for (int column = 0; column < n; ++column) a[row][column] += powers[row + column];
      a[row][n] += powers[row] * peaks[i];
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

double relativeMiss(const Polynomial& model, const PeakSeries& series, std::size_t i) {
  double residual = std::fabs(model.at(series.sizes[i]) - series.peaks[i]);
  return series.scales[i] > 0 ? residual / series.scales[i] : residual;
}

double maxRelativeResidual(const Polynomial& model, const PeakSeries& series) {
  double worst = 0;
  for (std::size_t i = 0; i < series.sizes.size(); ++i) {
    worst = std::max(worst, relativeMiss(model, series, i));
  }
  return worst;
}

// Fitted to all but the largest size, how far the model misses the largest (relative).
double holdoutError(const PeakSeries& series, int degree) {
  std::size_t last = series.sizes.size() - 1;
  Polynomial model = leastSquares(series.sizes, series.peaks, last, degree);
  return relativeMiss(model, series, last);
}

}  // namespace

Polynomial SeriesFit::chosen() const {
  if (model == "linear") return line;
  if (model == "quadratic") return curve;
  return Polynomial{};
}

SeriesFit fitSeries(const PeakSeries& series, double tolerance) {
  SeriesFit fit;
  std::size_t count = series.sizes.size();
  fit.line = leastSquares(series.sizes, series.peaks, count, 1);
  if (count < 3) return fit;
  fit.line_residual = maxRelativeResidual(fit.line, series);
  fit.line_holdout = holdoutError(series, 1);
  if (count >= 4) {
    fit.has_curve = true;
    fit.curve = leastSquares(series.sizes, series.peaks, count, 2);
    fit.curve_residual = maxRelativeResidual(fit.curve, series);
    fit.curve_holdout = holdoutError(series, 2);
  }
  if (fit.line_residual <= tolerance && fit.line_holdout <= tolerance) {
    fit.model = "linear";
  } else if (fit.has_curve && fit.curve.c[2] > 0 && fit.curve_residual <= tolerance &&
             fit.curve_holdout <= tolerance) {
    fit.model = "quadratic";
  }
  return fit;
}

std::optional<std::int64_t> largestFitting(const std::function<double(double)>& peak,
                                           double usable) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 50;
  if (peak(1) > usable) return std::nullopt;
  std::int64_t low = 1;
  std::int64_t high = 2;
  while (high < kLimit && peak(static_cast<double>(high)) <= usable) {
    low = high;
    high *= 2;
  }
  if (high >= kLimit) return std::nullopt;
  while (high - low > 1) {
    std::int64_t middle = low + (high - low) / 2;
    if (peak(static_cast<double>(middle)) <= usable) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

}  // namespace memseal::explain
