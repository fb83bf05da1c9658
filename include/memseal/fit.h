// How far a size (batch, sequence length) can grow before a memory budget is exceeded: peak
// memory measured at a few sizes, a model fitted through them, the largest size that fits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memseal/export.h"
#include "memseal/tracker.h"

namespace memseal {

// The step's own peak within one of its phases: "forward" (before backward began), "backward"
// (from its first node to its last: later micro-batches' forwards included) and "update" (after
// backward: the optimizer's step and what follows). A step without backward has none.
struct PhasePeak {
  std::string phase;
  std::int64_t peak_bytes = 0;
};

struct FitPoint {
  FitPoint() = default;
  FitPoint(std::int64_t size_, std::int64_t peak_bytes_, std::vector<PhasePeak> phases_ = {})
      : size(size_), peak_bytes(peak_bytes_), phases(std::move(phases_)) {}

  std::int64_t size = 0;
  std::int64_t peak_bytes = 0;    // the step's peak: the highest of its phases' peaks
  std::vector<PhasePeak> phases;  // empty when phases were not told apart
};

// One phase's peak against size. Residuals are relative to the step's peak at each size: a phase
// far below the step's peak may wander without changing the answer.
struct PhaseModel {
  std::string phase;
  std::string model = "none";  // "linear", "quadratic" or "none"
  double c0 = 0, c1 = 0, c2 = 0;
  double max_residual = 0;
  double holdout_error = 0;
};

// From `size` on (up to the next change), `phase` holds the step's predicted peak.
struct PhaseChange {
  std::int64_t size = 0;
  std::string phase;
};

struct FitOptions {
  std::vector<std::int64_t> sizes = {1, 2, 4, 8};  // at least three distinct, positive
  std::optional<std::int64_t> budget_bytes;  // unset: available memory (MemAvailable + tracked)
  double margin = 0.10;                      // fraction of the budget the prediction keeps free
  double tolerance = 0.03;                   // largest relative residual a model may leave
  // Run the predicted size and measure it; when it misses the prediction by more than the
  // tolerance, goes over the budget or fails, search the largest size that fits by measuring.
  bool verify = false;
  std::uint32_t max_search_sizes = 24;  // sizes the search may measure, at most
  std::uint32_t warmup_steps = 1;       // per size, before the measured step
  // -1: the peak of host tensor memory, phase by phase. N: the most the CUDA caching allocator
  // reserved on cuda:N in the step (what must fit the device: blocks, their rounding and the
  // segments they split), each size measured from an empty cache; the step is fitted whole, and
  // the default budget is the device memory this process could have.
  int device = -1;
  // Unset options: stacks off. Ops are always watched on every step, with their outputs read: the
  // phases come from the ops that record autograd history and from backward's nodes.
  TrackerOptions tracker;
};

struct MEMSEAL_API FitReport {
  std::string memory = "host";   // what the peaks count: "host", or "cuda:N" (reserved bytes)
  std::vector<FitPoint> points;  // smallest size first
  // "phases" (the highest of the phase models), "linear", "quadratic" or "none". The step's own
  // line and parabola below are fitted either way.
  std::string model = "none";
  bool is_linear = false;
  double linear_intercept = 0, linear_slope = 0, linear_max_residual = 0;
  // Fitted without the largest size, how far the model misses it (relative): a model is used only
  // when this too is within the tolerance.
  double linear_holdout_error = 0;
  bool has_quadratic = false;  // four points or more
  double quadratic_c0 = 0, quadratic_c1 = 0, quadratic_c2 = 0, quadratic_max_residual = 0;
  double quadratic_holdout_error = 0;
  // Each phase's model, where every point told its phases apart (the same phases at each size).
  std::vector<PhaseModel> phases;
  std::string limiting_phase;              // the phase whose model is highest at the predicted size
  std::vector<PhaseChange> phase_changes;  // from the smallest measured size to the predicted one
  double tolerance = 0;
  std::optional<std::int64_t> budget_bytes;
  std::string budget_source;  // "--budget", "api", "available memory" or "device memory"
  double margin = 0;
  std::optional<std::int64_t> predicted_max_size;
  std::optional<std::int64_t> predicted_peak_bytes;
  // The predicted size over the largest measured one (1 or less: no extrapolation).
  double extrapolation = 0;
  std::string refusal;  // why there is no prediction; empty when there is one
  struct Measurement {
    std::int64_t size = 0;
    std::int64_t peak_bytes = 0;
    bool fits = false;  // ran, and its peak is within the budget less its margin
    std::string error;  // what the step threw at that size (out of memory), empty when it ran
  };
  struct Verification {
    std::int64_t size = 0;
    std::int64_t predicted_peak_bytes = 0;
    std::int64_t measured_peak_bytes = 0;
    double relative_error = 0;
    bool within_budget = false;
    std::string error;  // what the step threw at that size (out of memory), empty when it ran
    // The prediction missed (by more than the tolerance, over the budget, or the step failed), so
    // the size was searched: each size measured, in order, and the answer they give.
    bool missed = false;
    std::vector<Measurement> searched;
    std::optional<std::int64_t> measured_max_size;  // the largest size measured to fit
    std::optional<std::int64_t> measured_max_peak_bytes;
    std::optional<std::int64_t> smallest_failing_size;  // the smallest measured not to fit
    // (predicted_max_size - measured_max_size) / measured_max_size: how far the model was off.
    std::optional<double> model_miss;
  };
  std::optional<Verification> verification;

  // The chosen model's peak at `size`; nullopt when no model describes the points.
  std::optional<double> predictPeak(std::int64_t size) const;
  // The answer to trust: the measured largest size where a search ran, else the prediction.
  std::optional<std::int64_t> largestSize() const;
  std::string toText() const;
  // Schema memseal.fit/2 (docs/explain-json.md).
  std::string toJson() const;
};

// Fits measured points (no running): the model, and the prediction against options.budget_bytes
// (none when unset). Points whose `phases` name the same phases at every size are fitted phase by
// phase. Throws std::invalid_argument for bad sizes or options.
MEMSEAL_API FitReport fitPeaks(std::vector<FitPoint> points, const FitOptions& options);

// Runs `step(size, i)` at each size (warm-up steps, then one measured), measures the peak of live
// tracked bytes in the measured step and in each of its phases, fits and predicts; with `verify`,
// runs the predicted size and, when the prediction misses, searches. An exception from the step
// at a verified or searched size (out of memory) is reported, not thrown.
MEMSEAL_API FitReport fitCapacity(const std::function<void(std::int64_t size, int step)>& step,
                                  const FitOptions& options);

// "16GiB", "512 MiB", "1.5G", "4096", "64KB": bytes (K/M/G/T and KiB/MiB/GiB/TiB are powers of
// 1024, kB/MB/GB/TB powers of 1000). nullopt when not understood, not positive or too large.
MEMSEAL_API std::optional<std::int64_t> parseByteSize(const std::string& text);
// What `fit --memory` names: "host" -> -1, "cuda" -> 0, "cuda:N" -> N (FitOptions::device);
// nullopt for anything else.
MEMSEAL_API std::optional<int> parseFitMemory(const std::string& memory);

// The memory this process may still use (MemAvailable) plus what tracked tensors hold now; 0 when
// it cannot be read.
MEMSEAL_API std::int64_t availableMemoryBytes();

}  // namespace memseal
