// Explaining memory that does not leak but still runs out: what is live at a step's peak and why
// (by role, module and site). Capacity is in fit.h, the trace for PyTorch's memory viewer in
// memory_trace.h, the HTML page in html.h; this header still includes all three (deprecated: it
// will stop doing so in the next release; include the one you use).
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
  // Optional: the module path that owns each tensor above, in the same order ("Net/encoder", as
  // the module split names modules). A parameter, its gradient and its optimizer state then count
  // in the split by module under their module, wherever they were allocated; missing or empty
  // entries leave a tensor where it was made. (`= {}`: braces that give the three lists above
  // only still initialise these without a warning.)
  std::vector<std::string> parameter_modules = {};
  std::vector<std::string> gradient_modules = {};
  std::vector<std::string> optimizer_state_modules = {};
};

struct RoleBytes {
  MemoryRole role = MemoryRole::kOther;
  std::int64_t bytes = 0;
  std::int64_t count = 0;
};

struct ModuleBytes {
  std::string module;  // Python module path or MEMSEAL_REGION path; "" when none
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
  std::string scope;       // the enclosing MEMSEAL_REGION path, as AllocationSite::scope
  std::uint32_t step = 0;  // made in
  TensorInfo tensor;
};

struct StepPeak {
  std::uint32_t step = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t baseline_bytes = 0;  // live when the step began
  std::int64_t end_bytes = 0;       // live when it ended
};

// A change that would lower this peak, with the bytes it removes from it, read from what the peak
// holds (not guessed), and what the change costs.
struct PeakRemedy {
  // "checkpoint-module", "gradients-to-none", "smaller-optimizer-state",
  // "lower-precision-activations", "in-place-temporaries", "free-previous-step".
  std::string kind;
  std::string target;  // the module, the op, or "" where the remedy is the whole step's
  std::int64_t bytes = 0;
  bool upper_bound = false;  // "up to": how much depends on what the estimate cannot see
  std::string change;        // what to do
  std::string cost;          // what it costs (recomputation, precision, convergence)
};

// A place on a CUDA device's peak: the op that allocated the blocks there and its MEMSEAL_REGION.
struct DevicePeakSite {
  std::string op;                        // "aten::empty_strided (inside aten::linear)", "<no op>"
  std::string scope;                     // "" outside regions
  MemoryRole role = MemoryRole::kOther;  // the role holding most of the site's bytes
  std::int64_t bytes = 0;
  std::int64_t count = 0;
};

// One CUDA device at the highest moment of its measured steps, from the caching allocator's own
// block and segment events: what the tensors held (allocated) beside what the allocator kept from
// the driver (reserved), and who held it. Roles are told by identity, as on the CPU: the block at
// the address of a named tensor's storage, a gradient backward accumulated into, a tensor autograd
// saved.
struct DevicePeak {
  int device = 0;
  std::uint32_t step = 0;
  // Bytes the tensors asked for at the peak, as the allocator's trace gives them (its blocks are
  // these rounded up: torch.cuda.memory_allocated() counts those).
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;            // segments the allocator held at that moment
  std::int64_t pending_free_bytes = 0;        // freed by the program, still in use by a stream
  std::int64_t baseline_allocated_bytes = 0;  // when the step began
  std::int64_t end_allocated_bytes = 0;       // when it ended
  std::int64_t reserved_peak_bytes = 0;       // the most reserved at any moment of the step
  std::int64_t blocks = 0;                    // blocks live at the peak
  std::int64_t events = 0;                    // the device's block and segment events in the step
  std::uint64_t dropped_events = 0;   // past max_events_per_step: the peak is read from the newest
  std::vector<RoleBytes> roles;       // all six, in MemoryRole order
  std::vector<DevicePeakSite> sites;  // largest first
  // By module (the site's module path or MEMSEAL_REGION; a named tensor under the module the
  // caller gave it), largest first.
  std::vector<ModuleBytes> modules;

  // Reserved but held by no tensor at the peak: the allocator's cache, the gaps of split segments
  // and the blocks' rounding.
  std::int64_t cachedFreeBytes() const {
    return reserved_bytes > allocated_bytes + pending_free_bytes
               ? reserved_bytes - allocated_bytes - pending_free_bytes
               : 0;
  }
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
  bool backward_ran = true;           // backward ran in the measured step (activations are known)
  // Allocations and frees of the step past max_events_per_step, not kept: its peak is read from the
  // newest only.
  std::uint64_t dropped_events = 0;
  std::uint32_t max_events_per_step = 0;
  // Notes in words alone (a tool's own); noteLines() gives every note, the fields' above included.
  std::vector<std::string> notes;
  std::vector<PeakRemedy> remedies;  // what would lower this peak, most bytes first
  std::optional<RankIdentity> rank;  // a distributed job's rank (memseal merge compares peaks)
  // Each CUDA device the measured steps used, at its own highest moment (the fields above count
  // host memory only).
  std::vector<DevicePeak> devices;

  std::int64_t bytesOf(MemoryRole role) const;
  // Every note in words, as the text, JSON and HTML reports give them.
  std::vector<std::string> noteLines() const;
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

}  // namespace memseal

// Deprecated: what explain.h held before (see the top of this file).
#include "memseal/fit.h"           // IWYU pragma: export
#include "memseal/html.h"          // IWYU pragma: export
#include "memseal/memory_trace.h"  // IWYU pragma: export
