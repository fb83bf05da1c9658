// The arithmetic of capacity: least squares of a line or a parabola through (size, peak) points,
// how well each describes them, and the largest size whose predicted peak fits. Pure: no libtorch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memseal::explain {

struct Polynomial {
  double c[3] = {0, 0, 0};  // c0 + c1 x + c2 x^2
  double at(double x) const { return c[0] + x * (c[1] + x * c[2]); }
};

// Peaks against size, smallest size first. A residual is relative to `scales` at the same size:
// the peak itself for the step, the step's peak for one of its phases.
struct PeakSeries {
  std::vector<double> sizes;
  std::vector<double> peaks;
  std::vector<double> scales;
};

struct SeriesFit {
  Polynomial line;
  double line_residual = 0;
  // Fitted without the largest size, how far the model misses it (relative): a model is used only
  // when this too is within the tolerance.
  double line_holdout = 0;
  bool has_curve = false;  // four points or more: three fit any parabola exactly
  Polynomial curve;
  double curve_residual = 0;
  double curve_holdout = 0;
  std::string model = "none";  // "linear", "quadratic" or "none"
  Polynomial chosen() const;
};

// The line, from four points on the parabola, and the model: the line when it describes the
// points within `tolerance` and predicts the largest from the others; else a parabola that opens
// upward (one bending down would promise unbounded room) and does the same; else none.
SeriesFit fitSeries(const PeakSeries& series, double tolerance);

// The largest integer size >= 1 whose `peak` is at most `usable`, for a peak that grows with size;
// nullopt when even size 1 does not fit, or nothing below 2^50 exceeds it.
std::optional<std::int64_t> largestFitting(const std::function<double(double)>& peak,
                                           double usable);

}  // namespace memseal::explain
