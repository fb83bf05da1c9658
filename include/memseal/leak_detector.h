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
#include "memseal/tracker.h"

namespace memseal {

// Why memory is retained. The identifiers (categoryId) are stable: they appear in JSON.
enum class LeakCategory {
  kAutogradGraphRetained,     // "autograd-graph-retained"
  kGradEnabledInference,      // "grad-enabled-inference"
  kParametersCreatedPerStep,  // "parameters-created-per-step"
  kTensorsRetained,           // "tensors-retained"
  kUntrackedGrowth,           // "untracked-growth"
};
MEMSEAL_API const char* categoryId(LeakCategory category);

struct LeakFinding {
  LeakCategory category = LeakCategory::kTensorsRetained;
  // What is retained: "tensor storage", "autograd graph nodes" or "resident memory".
  std::string retained;
  double bytes_per_step =
      0;  // for graph nodes and resident memory: resident-memory growth per step
  double count_per_step = 0;
  std::int64_t survivors = 0;  // retained allocations (or sampled nodes) at the last step
  std::int64_t survivor_bytes = 0;
  std::uint32_t steps_with_survivors = 0;  // of the steps after warm-up
  AllocationSite site;
  TensorInfo tensor;  // one example
  std::string hint;   // the cause and its fix, in words
};

// Totals at one step boundary (after the step ran).
struct StepSample {
  std::uint32_t step = 0;
  std::int64_t live_bytes = 0;  // tensor memory tracked on the CPU
  std::int64_t live_count = 0;
  std::int64_t resident_bytes = 0;     // the process's resident set
  std::int64_t graph_nodes_alive = 0;  // sampled autograd nodes of earlier steps still alive
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

  std::string toText() const;
  std::string toJson() const;  // schema "memseal.check/1"
};

enum class LeakPolicy {
  kWarn,      // print the report to stderr
  kThrow,     // throw LeakError carrying the report
  kCallback,  // call DetectorOptions::on_leak_callback
  kNone,      // just return the report
};

struct DetectorOptions {
  std::uint32_t warmup = 5;  // steps whose allocations are never blamed (lazy state, workspaces)
  std::uint32_t steps = 30;  // for check(): steps to run in all, warm-up included
  LeakPolicy on_leak = LeakPolicy::kWarn;
  std::function<void(const LeakReport&)> on_leak_callback;
  TrackerOptions tracker{StackMode::kOn};
  bool watch_graph_nodes = true;      // autograd nodes that survive steps
  bool watch_resident_memory = true;  // growth outside tensor storage
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

  // Call at the end of every iteration. Cost: one pass over the live allocations.
  void step();
  // The analysis as of the last step boundary.
  LeakReport report() const;
  // Stops tracking and applies the policy to the final report, which it returns.
  LeakReport finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Runs `step_fn(i)` for i in [0, options.steps) under a detector and returns finish()'s report.
MEMSEAL_API LeakReport check(const std::function<void(int)>& step_fn, DetectorOptions options = {});

}  // namespace memseal
