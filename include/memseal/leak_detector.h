// The leak detector: watches a loop step by step, decides by itself whether memory leaks, and says
// where it comes from, why, and how to fix it.
//
//   memseal::LeakDetector detector;            // starts tracking
//   for (int i = 0; i < 50; ++i) { train_step(i); detector.step(); }
//   memseal::LeakReport report = detector.finish();   // warns, throws or calls back on a leak
//
// or in one line: `memseal::LeakReport report = memseal::check(train_step, options);`
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "memseal/export.h"
#include "memseal/policy.h"
#include "memseal/tracker.h"

namespace memseal {

// Why memory is retained. The identifiers (categoryId) are stable: they appear in JSON.
enum class LeakCategory {
  kAutogradGraphRetained,     // "autograd-graph-retained"
  kGradEnabledInference,      // "grad-enabled-inference"
  kParametersCreatedPerStep,  // "parameters-created-per-step"
  kTensorsRetained,           // "tensors-retained"
  kUntrackedGrowth,           // "untracked-growth"
  kCreateGraphCycle,          // "create-graph-cycle"
};
MEMSEAL_API const char* categoryId(LeakCategory category);

// The shapes of a finding's retained tensors when they are not all alike (a cache keyed by input
// size): per dimension the smallest and largest size, and how many distinct shapes (counted up to
// 64). Empty when every retained tensor had the same shape, or ranks differ.
struct ShapeRange {
  std::vector<std::int64_t> min;
  std::vector<std::int64_t> max;
  std::uint32_t distinct = 0;
};

// One site's share of what a finding holds (one layer's activations behind a kept output, one
// parameter of a module built every step).
struct LeakPart {
  std::string retained;  // "tensor storage" or "autograd graph nodes"
  AllocationSite site;
  TensorInfo tensor;  // one example
  ShapeRange shapes;
  double bytes_per_step = 0;
  double count_per_step = 0;
  std::int64_t survivors = 0;
  std::int64_t survivor_bytes = 0;
  std::uint32_t steps_with_survivors = 0;
  // The steps survivors were looked for in: those after warm-up, or for graph nodes the ones whose
  // ops were watched.
  std::uint32_t steps_observed = 0;
  // Data addresses of some of its survivors' storage (up to 256), as of the report, for tools that
  // look up what holds them (the Python module names the variable or container). Not in JSON.
  std::vector<std::uintptr_t> storage_addresses;
};

// Memory a cause held for a while and then freed at once, before the report: it built up step after
// step and was released together when a phase ended, a function that held it returned, or a
// running total was reset; once, or again and again (a sawtooth). Holding it is the mistake: a
// longer phase, or a larger model, runs out of memory with it.
struct HeldUntilFreed {
  std::uint32_t first_step = 0;     // the first step whose memory it held (of its first build-up)
  std::uint32_t last_step = 0;      // the last step whose memory it held
  std::uint32_t freed_at_step = 0;  // the step during which its last build-up was freed
  std::uint32_t times = 0;          // build-ups, each freed together (a sawtooth: more than one)
  double steps_per_time = 0;  // a build-up's length, in steps (a sawtooth's period: the median)
  // The most one build-up held: its tensor storage, or for autograd graphs without storage the
  // resident memory that grew while it built up.
  std::int64_t peak_bytes = 0;
  std::string phase;         // the phase of its steps ("" when the program named none)
  bool building_up = false;  // at the report, it is building up again
  // Steps of its first build-up before it was judged growing (how soon it was found).
  std::uint32_t found_after_steps = 0;
  // memseal run: a build-up's mean length in iterations of its loop, where steps took several
  // iterations (those closer together than a step costs); 0 where steps are iterations.
  double iterations_per_time = 0;
  // Freed by Python's garbage collector: garbage in reference cycles, waiting for the collector
  // (LeakReport::freed_build_ups only).
  bool by_collector = false;
};

struct LeakFinding {
  LeakCategory category = LeakCategory::kTensorsRetained;
  // What is retained: "tensor storage", "autograd graph nodes" or "resident memory".
  std::string retained;
  // Tensor storage: bytes retained per step, all parts together. Graph nodes and resident memory:
  // resident-memory growth per step.
  double bytes_per_step = 0;
  double count_per_step = 0;
  std::int64_t survivors = 0;  // retained allocations (or sampled nodes) at the last step
  std::int64_t survivor_bytes = 0;
  std::uint32_t steps_with_survivors = 0;  // of steps_observed
  std::uint32_t steps_observed = 0;        // see LeakPart::steps_observed
  AllocationSite site;                     // where the cause is: the kept root, or the largest part
  TensorInfo tensor;                       // one example
  ShapeRange shapes;
  // What one cause keeps alive, site by site, largest first (one part when a single site).
  std::vector<LeakPart> parts;
  // untracked-growth: the resident growth per step that retained tensors and graphs explain, which
  // bytes_per_step does not include.
  double explained_bytes_per_step = 0;
  // A finding that keeps autograd graphs alive: the process's resident memory growth per step while
  // it built up, what its graphs' nodes cost beyond the tensor storage in bytes_per_step (a kept
  // loss is 4 bytes of storage and a graph of nodes). 0 where not judged (no graphs, not read).
  double resident_bytes_per_step = 0;
  std::string hint;  // the cause and its fix, in words
  // Set when what it held was freed before the report (see HeldUntilFreed); the other fields
  // then describe its largest build-up, as seen while it was held.
  std::optional<HeldUntilFreed> freed;
};

// What keeps a finding's tensors alive in a Python program: a named root (a global, a local of a
// running frame, an attribute, a closure, a hook, an lru_cache) and the path of references to it,
// found on the garbage collector's heap when a report with a leak is made (the Python module,
// `memseal run` of a Python program). JSON: "python.holders".
struct LeakHolder {
  int finding = 0;          // index into LeakReport::findings; -1: a line about the search itself
  std::string description;  // "list `losses` (global of train.py)"
  std::string kind;         // global, local, traceback, attribute, module, hook, lru_cache, unnamed
  std::uint32_t tensors = 0;  // how many of the finding's sampled storages it holds
  bool via_graph = false;     // it holds a tensor whose autograd graph keeps the finding's memory
};

// Totals at one step boundary (after the step ran).
struct StepSample {
  std::uint32_t step = 0;
  std::int64_t live_bytes = 0;  // tensor memory tracked on the CPU
  std::int64_t live_count = 0;
  // The process's resident set, as of the last boundary that read it: every boundary through
  // warm-up + 10 steps and while a leak is suspected; otherwise as often as the read's cost (a
  // system call) allows beside the steps' time, at least one boundary in 8. Less the detector's
  // own records of the steps (48 bytes a step, up to 1.5 MiB), which grow with the run, and less
  // what malloc holds free for reuse (glibc's mallinfo2): memory freed, not in use.
  std::int64_t resident_bytes = 0;
  // Sampled autograd nodes of earlier steps still alive, as of the last boundary where the verdict
  // was renewed (every boundary through warm-up + 10 steps and while a leak is seen, else one in 8
  // while memory moves, less often on boundaries that look alike: see LeakDetector::step).
  std::int64_t graph_nodes_alive = 0;
  std::uint32_t phase = 0;  // index into LeakReport::phases (0 when the steps had one phase)
};

// A phase of the program's steps (LeakDetector::phase, or a loop memseal run found).
struct PhaseSummary {
  std::string name;
  std::uint32_t first_step = 0;
  std::uint32_t steps = 0;
  std::uint32_t runs = 0;  // times it began (an epoch's training loop: once per epoch)
  bool backward_ran = false;
};

// A CUDA device's memory as PyTorch's caching allocator reported it, as of the report.
struct DeviceStepPoint {
  std::uint32_t step = 0;
  std::uint64_t allocated = 0;  // bytes of tensors' blocks
  std::uint64_t reserved = 0;   // bytes of the allocator's segments
};

struct DeviceMemorySummary {
  std::string device;   // "cuda:0"
  std::string verdict;  // "steady", "leak", "caching" or "fragmentation" (after warm-up)
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  // Free gaps inside segments that also hold live blocks (torch.cuda.empty_cache() cannot return
  // them), and the largest free range inside one segment: the biggest request the cache can serve.
  std::uint64_t inactive_split_bytes = 0;
  std::uint64_t largest_free_extent = 0;
  std::string hint;  // what the verdict means and what to do
  // Verdict "leak": how much allocated memory grew per step after warm-up, and where the report
  // shows it: "tensors" (its findings name the tensors kept), "work" (no block outlived the step
  // after the one that made it: each step's work grows, which is no leak but runs out of memory)
  // or "blocks" (a finding of the allocator's own blocks, made outside watched ops).
  double growth_per_step = 0;
  std::string growth_shown_as;
  // At each step boundary; past kMaxDeviceSummarySteps, each point stands for a stretch of steps
  // (its last step, the stretch's highest allocated and highest reserved).
  std::vector<DeviceStepPoint> per_step;
};
constexpr std::size_t kMaxDeviceSummarySteps = 512;

// Which process of a distributed job a report is of: the variables torchrun (and
// torch.distributed's other launchers) set for each worker (RANK, LOCAL_RANK, WORLD_SIZE,
// TORCHELASTIC_RUN_ID), or what torch.distributed says once initialised.
struct RankIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  std::string run_id;  // the job's rendezvous id; empty when the launcher gave none
  // A job across machines (torchrun --nnodes N): the node this rank runs on (torchrun's
  // GROUP_RANK; the node of rank 0 is 0; -1: not known, a rank of another node that never
  // reported) and how many there are. 1 node: a job of one machine.
  int node = 0;
  int nodes = 1;
};
// The rank this process is, from its environment; empty outside a distributed job (RANK or
// WORLD_SIZE unset or not numbers).
MEMSEAL_API std::optional<RankIdentity> rankFromEnvironment();

// Freed memory that malloc (glibc) keeps inside the process, when it grew by 64 MiB or more after
// warm-up: resident, yet in no tensor.
struct MallocFreeMemory {
  std::int64_t after_warmup_bytes = 0;
  std::int64_t now_bytes = 0;
  // What each step freed, stranded between the autograd graphs kept across steps: part of what
  // that leak costs (counted in its resident memory per step). Otherwise holes in malloc's heap
  // between allocations of ever-new sizes: no leak.
  bool kept_graphs_cost = false;
};

// memseal run: how a report came to be where it is not simply the one at the program's end.
struct ReportOrigin {
  // The program freed what it held as it ended, so this is the report taken after this step,
  // `ms_before_end` milliseconds before the end.
  std::optional<std::uint32_t> taken_after_step;
  std::int64_t ms_before_end = 0;
  // Taken while the program ran, keeping the newest this many steps' samples (0: all of them).
  std::uint32_t newest_steps_kept = 0;
  // Process `pid` ended before its final report (a crash, a kill or _exit): this is its latest
  // report, taken while it ran, `interim_age` ("3.2 s") before memseal read it; "" otherwise.
  std::string interim_age;
  std::int64_t pid = 0;
  // A forked child (not exec'd) of this pid, watched per time window with tracked tensor memory and
  // private memory only; 0 otherwise.
  std::int64_t forked_from_pid = 0;
};

struct MEMSEAL_API LeakReport {
  bool leak = false;
  std::uint32_t steps = 0;  // steps observed, warm-up included
  std::uint32_t warmup = 0;
  // The step after which the verdict said "leak" and never changed back; empty without a leak.
  std::optional<std::uint32_t> detected_at_step;
  std::vector<LeakFinding> findings;  // largest first
  std::vector<StepSample> per_step;
  bool backward_ran = false;  // whether the loop ran autograd backward after warm-up
  // What the report says beside its findings, as fields that memseal's reporters put in words
  // (noteLines()):
  // Why autograd graph nodes were not watched ("ops not watched", "tensor metadata off"), so a
  // graph kept alive without tensor storage is not seen; empty when they were.
  std::string graph_nodes_unwatched;
  // Build-ups judged no leak: tensors without autograd history a phase gathered and freed
  // together, and garbage Python's collector freed (freed->by_collector). Each has `freed`.
  std::vector<LeakFinding> freed_build_ups;
  std::optional<MallocFreeMemory> malloc_free;
  // Nonzero: the program changed phase more than this many times, and later steps were judged with
  // the phase they began in.
  std::uint32_t phase_changes_capped_at = 0;
  // Where what was live when CUDA ran out of memory was written; empty without.
  std::string cuda_oom_file;
  ReportOrigin origin;
  // Notes in words alone: a report of an older memseal, or a tool's own.
  std::vector<std::string> notes;
  // Where the steps came from, when memseal took them (`memseal run`): one line per source, saying
  // what a step was and how many it ended ("one step per call of SGD.step() ... (600 steps)");
  // empty where the program called step() itself.
  std::vector<std::string> steps_from;
  // One per CUDA device whose caching allocator's events were seen, by ordinal; empty without.
  std::vector<DeviceMemorySummary> devices;
  // The phases of the steps, by StepSample::phase; empty when the program named none (one phase).
  std::vector<PhaseSummary> phases;
  // The rank of a distributed job the report is of; empty outside one.
  std::optional<RankIdentity> rank;
  // What holds the findings, at most a few per finding; empty outside Python or without a leak.
  std::vector<LeakHolder> holders;

  // Every note in words, the fields' above and `notes`, as the text, JSON and HTML reports give
  // them.
  std::vector<std::string> noteLines() const;
  std::string toText() const;
  // Schema "memseal.check/1" (kCheckReportSchema), keys in a fixed order with "schema" first.
  std::string toJson() const;
  // Reads what toJson wrote (also by an older memseal of the same schema). Throws
  // std::invalid_argument saying what is wrong: not JSON, another schema, a newer version than
  // this memseal reads, a field missing or of the wrong type.
  static LeakReport fromJson(const std::string& json);
};

// The JSON report's schema name and the version this memseal writes and reads.
MEMSEAL_API extern const char* const kCheckReportSchema;  // "memseal.check"
MEMSEAL_API extern const int kCheckReportVersion;         // 1

struct DetectorOptions {
  std::uint32_t warmup = 5;  // steps whose allocations are never blamed (lazy state, workspaces)
  std::uint32_t steps = 30;  // for check(): steps to run in all, warm-up included
  ReportPolicy on_leak = ReportPolicy::kWarn;
  std::function<void(const LeakReport&)> on_leak_callback;
  // Unset options come from the environment, else the detector's defaults: stacks on, ops watched
  // automatically (every step through warm-up and the first steps after it, then one step in 32
  // while the loop repeats itself, fewer as it keeps repeating, down to one in 512, and one in 32
  // again while tracked memory climbs, each with the step after it: OpWatching::Mode::kAuto).
  TrackerOptions tracker;
  // Autograd nodes that survive steps. Needs ops watched and tensor metadata: where the options
  // turn those off, graph nodes are not watched and the report says so.
  bool watch_graph_nodes = true;
  bool watch_resident_memory = true;  // growth outside tensor storage
  // Nonzero in a child forked (not exec'd) from this pid, which shares its parent's pages until it
  // writes them: its resident set counts what the parent holds, so its private memory is judged
  // instead, growth of it beyond what tensors explain is copy-on-write (a dataset of Python objects
  // read in a DataLoader worker), and the report's origin names the parent. The detector is made
  // in the child, after the parent's has stopped there.
  std::int64_t forked_from_pid = 0;
};

class MEMSEAL_API LeakError : public std::runtime_error {
 public:
  explicit LeakError(LeakReport report);
  const LeakReport& report() const { return report_; }

 private:
  LeakReport report_;
};

class MEMSEAL_API LeakDetector {
 public:
  // Starts a tracker. Throws std::invalid_argument on options that cannot work and
  // std::logic_error if another tracker runs.
  explicit LeakDetector(DetectorOptions options = {});
  ~LeakDetector();
  LeakDetector(const LeakDetector&) = delete;
  LeakDetector& operator=(const LeakDetector&) = delete;

  // Call at the end of every iteration. Cost: one pass over the live allocations on the steps
  // that renew the verdict (every step through warm-up and the 10 after it, every step while a
  // leak is suspected, one in 8 while memory moves); a few counters read on the others. A loop
  // whose boundaries look alike since the last renewal (the same tracked bytes and tensors, no
  // new high of resident memory, no step's graph linked to an earlier one's, no CUDA memory
  // events) is renewed when 512 times the last renewal's time has passed, at least one boundary
  // in 64.
  void step();
  // The steps from now on belong to the phase `name` ("train", "validate"; a name used before
  // continues that phase). What a phase keeps across its steps is judged against the steps of
  // that phase, so a leak in a validation pass a tenth as long as training is found, and what
  // a phase's end frees is still reported when it was held step after step (HeldUntilFreed).
  // `steps_back`: the last that many steps taken belong to it too (a caller that learns where a
  // phase began only a few steps into it).
  void phase(const std::string& name, std::uint32_t steps_back = 0);
  // Watches ops as `watching` says from the step now running on, in place of the options'
  // watch_ops: a caller whose steps became whole iterations of its loop (`memseal run`, once it
  // counts them) lets the ops of most steps go unwatched. Not concurrently with step().
  void watchOps(const OpWatching& watching);
  // The analysis as of the last step boundary. Like step(), not to be called from two threads at
  // once (it may write down what a build-up holds, which step() left for later).
  LeakReport report() const;
  // The same, for a program whose loop ended at step `loop_ended_at` and whose end (main's locals
  // going, Python's globals) then freed what the loop kept while steps went on (time windows run
  // through a program's teardown): a build-up freed from that step on that was held since its
  // phase's first run, and judged at least 8 steps before it went, is a finding, as a report taken
  // when the loop ended would have said, not memory held for a while and then freed.
  LeakReport report(std::uint32_t loop_ended_at) const;
  // Stops tracking and applies the policy to the final report, which it returns.
  LeakReport finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Runs `step_fn(i)` for i in [0, options.steps) under a detector and returns finish()'s report.
MEMSEAL_API LeakReport check(const std::function<void(int)>& step_fn, DetectorOptions options = {});

}  // namespace memseal
