// How far a size (batch, sequence length) can grow before a memory budget is exceeded: peak
// memory measured at a few sizes, a model fitted through them, the largest size that fits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memseal/export.h"
#include "memseal/tracker.h"

namespace memseal {

struct FitPoint {
  std::int64_t size = 0;
  std::int64_t peak_bytes = 0;
};

struct FitOptions {
  std::vector<std::int64_t> sizes = {1, 2, 4, 8};  // at least three distinct, positive
  std::optional<std::int64_t> budget_bytes;  // unset: available memory (MemAvailable + tracked)
  double margin = 0.10;                      // fraction of the budget the prediction keeps free
  double tolerance = 0.03;                   // largest relative residual a model may leave
  bool verify = false;                       // run the predicted size once and measure it
  std::uint32_t warmup_steps = 1;            // per size, before the measured step
  TrackerOptions tracker;  // unset: stacks off, ops not watched (counters are enough)
};

struct MEMSEAL_API FitReport {
  std::vector<FitPoint> points;  // smallest size first
  std::string model = "none";    // "linear", "quadratic" or "none"
  bool is_linear = false;
  double linear_intercept = 0, linear_slope = 0, linear_max_residual = 0;
  // Fitted without the largest size, how far the model misses it (relative): a model is used only
  // when this too is within the tolerance.
  double linear_holdout_error = 0;
  bool has_quadratic = false;  // four points or more
  double quadratic_c0 = 0, quadratic_c1 = 0, quadratic_c2 = 0, quadratic_max_residual = 0;
  double quadratic_holdout_error = 0;
  double tolerance = 0;
  std::optional<std::int64_t> budget_bytes;
  std::string budget_source;  // "--budget", "api" or "available memory"
  double margin = 0;
  std::optional<std::int64_t> predicted_max_size;
  std::optional<std::int64_t> predicted_peak_bytes;
  std::string refusal;  // why there is no prediction; empty when there is one
  struct Verification {
    std::int64_t size = 0;
    std::int64_t predicted_peak_bytes = 0;
    std::int64_t measured_peak_bytes = 0;
    double relative_error = 0;
    bool within_budget = false;
    std::string error;  // what the step threw at that size (out of memory), empty when it ran
  };
  std::optional<Verification> verification;

  // The chosen model's peak at `size`; nullopt when no model describes the points.
  std::optional<double> predictPeak(std::int64_t size) const;
  std::string toText() const;
  // Schema memseal.fit/1 (docs/explain-json.md).
  std::string toJson() const;
};

// Fits measured points (no running): the model, and the prediction against options.budget_bytes
// (none when unset). Throws std::invalid_argument for bad sizes or options.
MEMSEAL_API FitReport fitPeaks(std::vector<FitPoint> points, const FitOptions& options);

// Runs `step(size, i)` at each size (warm-up steps, then one measured), measures the peak of live
// tracked bytes in the measured step, fits and predicts; with `verify`, runs the predicted size.
// An exception from the step at the verified size (out of memory) is reported, not thrown.
MEMSEAL_API FitReport fitCapacity(const std::function<void(std::int64_t size, int step)>& step,
                                  const FitOptions& options);

// "16GiB", "512 MiB", "1.5G", "4096", "64KB": bytes (K/M/G/T and KiB/MiB/GiB/TiB are powers of
// 1024, kB/MB/GB/TB powers of 1000). nullopt when not understood, not positive or too large.
MEMSEAL_API std::optional<std::int64_t> parseByteSize(const std::string& text);

// The memory this process may still use (MemAvailable) plus what tracked tensors hold now; 0 when
// it cannot be read.
MEMSEAL_API std::int64_t availableMemoryBytes();

}  // namespace memseal
