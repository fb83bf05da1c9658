// Explaining memory that does not leak but still runs out: what is live at a step's peak and why
// (by role, module and site), how far the batch size can grow before a budget is exceeded, the
// allocation trace for PyTorch's memory viewer, and one HTML page for all of it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memseal/export.h"
#include "memseal/leak_detector.h"
#include "memseal/tracker.h"

namespace memseal {

// Why a tensor was live at the peak. Told by identity, never by size: parameters, gradients and
// optimizer state are the tensors the caller names (RoleTensors), and the leaves and .grad that
// backward reaches; activations are what autograd's graph saved for backward.
enum class MemoryRole : std::uint8_t {
  kParameters,      // the model's parameters and buffers (and autograd leaves backward reached)
  kGradients,       // their .grad
  kOptimizerState,  // the optimizer's state tensors (Adam's exp_avg and exp_avg_sq, momentum)
  kActivations,     // saved by autograd for backward: held by the graph when backward began
  kTemporaries,     // made in the step and freed before it ended, none of the above
  kOther,           // live before the step or after it, none of the above (inputs, outputs, caches)
};
constexpr int kMemoryRoleCount = 6;
// "parameters", "gradients", "optimizer_state", "activations", "temporaries", "other".
MEMSEAL_API const char* roleId(MemoryRole role);

// The tensors that name roles; memseal compares their storage, so views work too. Collected after
// each measured step (and before the first), so lazily created state (Adam's) counts.
struct RoleTensors {
  std::vector<at::Tensor> parameters;  // and buffers
  std::vector<at::Tensor> gradients;
  std::vector<at::Tensor> optimizer_state;
};

struct RoleBytes {
  MemoryRole role = MemoryRole::kOther;
  std::int64_t bytes = 0;
  std::int64_t count = 0;
};

struct ModuleBytes {
  std::string module;  // Python module path or MEMSEAL_SCOPE path; "" when none
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  std::int64_t role_bytes[kMemoryRoleCount] = {};
};

struct PeakSite {
  AllocationSite site;
  MemoryRole role = MemoryRole::kOther;  // the role holding most of the site's bytes
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  TensorInfo tensor;  // one example
};

struct PeakTensor {
  std::int64_t bytes = 0;
  MemoryRole role = MemoryRole::kOther;
  std::string op;
  std::string scope;
  std::uint32_t step = 0;  // made in
  TensorInfo tensor;
};

struct StepPeak {
  std::uint32_t step = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t baseline_bytes = 0;  // live when the step began
  std::int64_t end_bytes = 0;       // live when it ended
};

// What was live at the highest peak of the measured steps. Bytes are tracked tensor storage.
struct MEMSEAL_API PeakReport {
  std::uint32_t steps = 0;
  std::uint32_t warmup = 0;
  std::uint32_t peak_step = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t baseline_bytes = 0;
  std::int64_t end_bytes = 0;
  std::int64_t peak_live_count = 0;
  std::int64_t events_in_step = 0;   // allocations and frees
  std::int64_t peak_event = 0;       // 0-based; the peak holds right after it
  std::vector<RoleBytes> roles;      // all six, in MemoryRole order
  std::vector<ModuleBytes> modules;  // largest first
  std::vector<PeakSite> sites;       // largest first
  std::vector<PeakTensor> tensors;   // largest first
  std::vector<std::pair<std::int64_t, std::int64_t>> timeline;  // (event, live bytes), <= 512
  std::vector<StepPeak> step_peaks;
  bool model_identified = false;      // parameters/gradients were named by the caller
  bool optimizer_identified = false;  // optimizer state was named by the caller
  std::vector<std::string> notes;

  std::int64_t bytesOf(MemoryRole role) const;
  std::string toText() const;
  // Schema memseal.explain/1 (docs/explain-json.md).
  std::string toJson() const;
};

struct ExplainOptions {
  std::uint32_t steps = 4;   // warm-up included; at least warmup + 1
  std::uint32_t warmup = 2;  // steps run first, not measured (lazy state, warm-up workspaces)
  // Unset options come from MEMSEAL_*, then explain's defaults: stacks on, ops watched on every
  // step, tensor metadata on (ops must be watched: roles and modules come from them).
  TrackerOptions tracker;
  // Names the model's and optimizer's tensors; may be empty (then parameters and gradients are
  // still told for the leaves backward reaches, optimizer state is not).
  std::function<RoleTensors()> roles;
  // Events kept per measured step; a step making more is described from its newest events only,
  // and the report says so.
  std::size_t max_events_per_step = std::size_t{1} << 20;
};

// Runs `step(i)` for i in [0, steps) under a tracker and describes the highest peak of the
// measured steps. Throws std::invalid_argument for options that cannot work and std::logic_error
// when a tracker runs already; exceptions from `step` propagate (tracking stops first).
MEMSEAL_API PeakReport explainPeak(const std::function<void(int)>& step,
                                   const ExplainOptions& options = {});

// ---- capacity ----

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

// ---- the allocation trace, for PyTorch's memory viewer ----

// Records every tracked allocation and free (of whichever Tracker, LeakDetector or scope runs)
// between start() and stop(), keeping the newest `max_events`, and writes them as the pickle
// torch.cuda.memory._snapshot() returns, which torch.cuda._memory_viz and its web viewer read.
// Where the CUDA caching allocator's events reach memseal, the newest `max_events` of them are kept
// as well, and each CUDA device is in the pickle with its segments and its trace (device_traces[N]
// is cuda:N; the CPU comes after the highest CUDA ordinal).
class MEMSEAL_API MemoryTrace {
 public:
  // PyTorch's viewer opens device traces up to about 100,000 entries (its own default history
  // length); an allocation and its free take five (segment_alloc, alloc, free_requested,
  // free_completed, segment_free), so the default keeps the newest 40,000 events.
  explicit MemoryTrace(std::size_t max_events = 40000);
  ~MemoryTrace();
  MemoryTrace(const MemoryTrace&) = delete;
  MemoryTrace& operator=(const MemoryTrace&) = delete;

  // Throws std::logic_error when another trace runs, std::runtime_error when the ring cannot be
  // had. The ring is touched at once (max_events x ~100 bytes), so it is resident before whatever
  // measures the process's memory starts.
  void start();
  // Stops recording and takes the allocations live now (of the newest tracking session).
  void stop();

  std::uint64_t allocations() const;  // recorded (after stop)
  std::uint64_t frees() const;
  std::uint64_t dropped() const;   // older events the rings (CPU and CUDA) could not keep
  std::int64_t liveBytes() const;  // in the live allocations taken at stop
  std::size_t liveCount() const;

  // The pickle's bytes; stops first if still running.
  std::string memoryVizPickle();
  // Writes it beside `path` and renames; throws std::runtime_error naming the path on failure.
  void writeMemoryViz(const std::string& path);

 private:
  struct Data;
  std::size_t max_events_;
  bool running_ = false;
  Data* data_ = nullptr;
};

// ---- the page ----

struct HtmlPage {
  std::string title;  // the case or script
  const LeakReport* check = nullptr;
  const PeakReport* explain = nullptr;
  const FitReport* fit = nullptr;
  std::string check_json;  // used instead of `check` when set (e.g. the Python module's report)
};

// Writes a report file whole: beside `path`, then renamed, so a failed write never leaves half a
// file nor replaces a good one. Throws std::runtime_error("cannot write PATH: reason").
MEMSEAL_API void writeReportFile(const std::string& path, const std::string& content);

// One self-contained HTML file: no network, every string from the program escaped.
MEMSEAL_API std::string renderHtml(const HtmlPage& page);
// Writes it beside `path` and renames; throws std::runtime_error naming the path on failure.
MEMSEAL_API void writeHtml(const HtmlPage& page, const std::string& path);
// The page's cards without the page around them (a <div> with a style that applies only inside
// it, no script), for a notebook's output cell.
MEMSEAL_API std::string renderHtmlFragment(const HtmlPage& page);

}  // namespace memseal
