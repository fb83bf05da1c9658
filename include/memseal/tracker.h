// The allocation tracker: sees every CPU tensor allocation and free libtorch makes, attributes each
// to the operator, user scope and (optionally) native stack that made it, and keeps live
// statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memseal/export.h"

namespace memseal {

// How call stacks are captured at allocation time.
enum class StackMode {
  kOff,      // no stacks: sites are told apart by operator and user scope only
  kOn,       // a stack for every allocation: native frames, and Python's where Python runs
  kSampled,  // a stack for every Nth allocation (TrackerOptions::stack_sample_every)
  // The Python frames of every allocation and no native ones: the Python line, for a fraction of
  // an unwind's cost (Python reports fold native frames anyway). Where no Python frames can be
  // had (no Python, or Python frames off), sites are told apart as with kOff.
  kPython,
};

// On which steps ATen ops are watched (at::RecordFunction) to name the op behind each allocation.
// Watching costs libtorch about 0.3 us on every op, which dominates loops of small ops. On a step
// whose ops are not watched, each thread's allocations are attributed by replaying the last watched
// step: the i-th allocation of the step gets the site (op, stack) and tensor signature of the i-th
// allocation of that step when its size and MEMSEAL_REGION match; from the first mismatch on, the
// rest of that thread's step goes to the site "<op not watched on this step>", never a guess.
// Steps are numbered by setStep, which LeakDetector::step() calls.
struct MEMSEAL_API OpWatching {
  enum class Mode : std::uint8_t {
    kOff,        // never: sites are told apart by stack and scope only, no tensor metadata
    kEveryStep,  // every op of every step
    kOneStepIn,  // the steps that are multiples of `every`
    kAuto,       // every step until the allocation sequence is stable, then one step in `every`
                 // (with the step after it),
                 // in 2x`every` then 4x`every` as watched steps keep matching; back to every
                 // step for a while when a step stops matching (backing off)
  };
  Mode mode = Mode::kEveryStep;
  std::uint32_t every = 1;

  static OpWatching off() { return {Mode::kOff, 0}; }
  static OpWatching everyStep() { return {Mode::kEveryStep, 1}; }
  static OpWatching oneStepIn(std::uint32_t n) { return {Mode::kOneStepIn, n}; }
  static OpWatching automatic(std::uint32_t n = 32) { return {Mode::kAuto, n}; }
  // The option's text: "off", "all", "every:N" or "auto" (see TrackerOptions::set).
  std::string text() const;
  bool operator==(const OpWatching& other) const {
    return mode == other.mode &&
           (mode == Mode::kOff || mode == Mode::kEveryStep || every == other.every);
  }
  bool operator!=(const OpWatching& other) const { return !(*this == other); }
};

// Every option may be left unset: it then comes from the environment (MEMSEAL_STACKS,
// MEMSEAL_TENSOR_METADATA, MEMSEAL_WATCH_OPS), else from the default of the entry point that
// starts tracking (Tracker: stacks off and ops watched on every step; LeakDetector: stacks on and
// ops watched automatically; LifetimeScope: stacks on). What code sets always wins.
struct MEMSEAL_API TrackerOptions {
  std::optional<StackMode> stacks = std::nullopt;
  std::optional<std::uint32_t> stack_sample_every = std::nullopt;  // for kSampled; 64 when unset
  // Reads the tensor that owns each new storage (shape, dtype, grad_fn) when the op returns.
  // This asks libtorch to hand over every op's outputs, which costs a little per watched op.
  std::optional<bool> record_tensor_metadata = std::nullopt;
  std::optional<OpWatching> watch_ops = std::nullopt;
  // watch_ops' former name, read where watch_ops is unset; deprecated, removed in the next release
  // (so are the option's former spellings "observe_ops" and MEMSEAL_OBSERVE_OPS, still taken). Not
  // marked [[deprecated]]: compilers would then warn wherever TrackerOptions is copied.
  std::optional<OpWatching> observe_ops = std::nullopt;

  // One grammar for every option, shared by the environment (MEMSEAL_<NAME>), `memseal check`
  // (--<name>, '_' written '-') and the Python module:
  //   stacks            off | on | sample:N
  //   tensor_metadata   on | off   (also 1 | 0)
  //   watch_ops       all | off | every:N | auto
  // N is a positive decimal integer below 2^32. Throws std::invalid_argument naming the option,
  // the value and what it accepts.
  void set(const std::string& name, const std::string& value);
  // The values `name` accepts, in words ("off, on or sample:N"); empty for an unknown name.
  static std::string expectedValues(const std::string& name);
  // The environment variable of option `name` ("MEMSEAL_STACKS" for "stacks"); empty for an
  // unknown name.
  static std::string environmentVariable(const std::string& name);
  // The options the environment sets (only those). Throws std::invalid_argument naming the
  // variable when a value is not understood.
  static TrackerOptions fromEnvironment();
  // Every option decided: as set here, else from the environment, else from `defaults`, else
  // built in (stacks off, sample every 64, tensor metadata on, ops watched on every step).
  // Throws std::invalid_argument for combinations that cannot work.
  TrackerOptions resolved(const TrackerOptions& defaults) const;
  TrackerOptions resolved() const;
};

// Counters for one device type. Bytes are the sizes libtorch asked for.
struct DeviceStats {
  std::string device;  // "cpu"
  std::int64_t live_bytes = 0;
  std::int64_t live_count = 0;
  // The most live at once since tracking began or the peak was last reset. For CPU memory, exact
  // while one thread allocates; a moment when several allocating threads all stood high may be
  // missed by up to 1 MiB a thread.
  std::int64_t peak_bytes = 0;
  std::int64_t allocated_bytes_total = 0;
  std::int64_t allocations_total = 0;
  std::int64_t frees_total = 0;
};

// What a tensor looked like: read when the op that allocated its storage returned, and refreshed
// from the tensor itself while it is alive (so requires_grad set later, as modules do, shows).
struct TensorInfo {
  bool known = false;  // false when no op output owned the storage (raw allocations)
  std::vector<std::int64_t> shape;
  std::string dtype;
  bool requires_grad = false;
  bool is_leaf = true;
  std::string grad_fn;  // empty when the tensor has no autograd history
  std::string device;   // "cuda:N" for a CUDA tensor, empty for CPU memory
};

struct StackFrame {
  std::uintptr_t address = 0;
  std::string function;  // demangled, empty when unknown
  std::string file;      // source file where debug info exists
  int line = 0;
  std::string library;       // the shared object (or executable) holding the address
  bool is_internal = false;  // inside libtorch, the C++ runtime or memseal itself
};

// Where allocations come from: the op being executed, the enclosing MEMSEAL_REGION and the stack.
struct AllocationSite {
  std::uint32_t id = 0;
  std::string op;  // innermost ATen op, e.g. "aten::empty"; "<no op>" outside any op
  std::string
      outer_op;  // outermost op on the thread, the one user code called, e.g. "aten::linear"
  // The enclosing MEMSEAL_REGION names joined with '/', empty outside regions. (Named `scope` in
  // reports and JSON since the first release; the accounting scopes are LifetimeScope's.)
  std::string scope;
  std::vector<StackFrame> frames;  // symbolized, innermost first; empty when stacks were off
};

struct LiveAllocation {
  std::size_t bytes = 0;
  std::uint32_t step = 0;  // the step it was made in (see setStep)
  bool grad_mode = false;
  bool inference_mode = false;
  std::int64_t time_ns = 0;  // steady clock, coarse: read by the thread at its first allocation of
                             // each step and every 16th, the ones between sharing it
  TensorInfo tensor;
};

struct SiteSnapshot {
  AllocationSite site;
  std::int64_t live_bytes = 0;
  std::int64_t live_count = 0;
  std::int64_t allocated_bytes_total = 0;
  std::int64_t allocations_total = 0;
  std::vector<LiveAllocation> allocations;  // the live ones, newest first, at most a few per site
};

struct Snapshot {
  DeviceStats cpu;
  std::vector<SiteSnapshot> sites;  // sites with live allocations, most live bytes first
};

// Starts tracking on start() and stops on stop() or destruction. One tracker runs at a time in a
// process; starting a second throws std::logic_error. Allocations made while it runs may be freed
// at any time later, from any thread, also after it stopped or was destroyed.
class MEMSEAL_API Tracker {
 public:
  explicit Tracker(TrackerOptions options = {});
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Throws std::invalid_argument when the options (or the environment) cannot work.
  void start();
  void stop();
  bool running() const;

  DeviceStats stats() const;
  // Live allocations grouped by site; `max_examples_per_site` bounds the allocations listed.
  Snapshot snapshot(std::size_t max_examples_per_site = 4) const;

  // As given; resolved() against the environment and the defaults when start() runs.
  const TrackerOptions& options() const { return options_; }

 private:
  TrackerOptions options_;
  bool running_ = false;
};

// True while any tracker runs.
MEMSEAL_API bool trackingActive();

// The current step number, recorded with each allocation (the leak detector advances it).
MEMSEAL_API void setStep(std::uint32_t step);
MEMSEAL_API std::uint32_t currentStep();

// Names a region of user code; allocations inside it are attributed to the name (reports call it
// the allocation's "scope", as in JSON's `scope` fields). Nestable, per thread. Prefer the
// MEMSEAL_REGION macro. `name` must outlive the region (a literal is ideal). Not to be confused
// with LifetimeScope (memseal/scope.h), which accounts for what a block of code leaves alive.
class MEMSEAL_API RegionGuard {
 public:
  explicit RegionGuard(const char* name);
  ~RegionGuard();
  RegionGuard(const RegionGuard&) = delete;
  RegionGuard& operator=(const RegionGuard&) = delete;

 private:
  std::uint32_t previous_path_;
};

// This release's predecessor's name; deprecated, removed in the next release.
using ScopeGuard [[deprecated("use memseal::RegionGuard (MEMSEAL_REGION)")]] = RegionGuard;

}  // namespace memseal

#define MEMSEAL_CONCAT_INNER(a, b) a##b
#define MEMSEAL_CONCAT(a, b) MEMSEAL_CONCAT_INNER(a, b)
#define MEMSEAL_REGION(name) ::memseal::RegionGuard MEMSEAL_CONCAT(memseal_region_, __LINE__)(name)
// Deprecated: MEMSEAL_REGION's former name, removed in the next release.
#define MEMSEAL_SCOPE(name) MEMSEAL_REGION(name)
