// What the leak detector has found out at a step boundary, before it is put into words: the
// survivor groups and graph roots that keep growing, and resident growth left unexplained.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "analyze/survivors.h"
#include "detect/graph_nodes.h"
#include "detect/retention_history.h"
#include "detect/run_series.h"
#include "detect/step_phases.h"
#include "memseal/leak_detector.h"

namespace memseal::detect {

struct StorageEvidence {
  analyze::SurvivorKey key;
  analyze::SurvivorGroup group;
  std::uint32_t judged_steps = 0;  // the steps of its phases it was judged over
  bool backward_ran = false;       // in those phases
};

// Its tensors carry autograd history: kept, they keep the graphs behind them.
inline bool withAutogradHistory(const StorageEvidence& storage) {
  return storage.key.grad_fn_name != 0;
}

struct GraphEvidence {
  NodeGroup group;
  std::uint32_t judged_steps = 0;  // the watched steps of its phases it was judged over
  bool backward_ran = false;
};

struct LeakEvidence {
  std::uint32_t first_step = 0;  // the steps after warm-up completed so far
  std::uint32_t last_step = 0;
  std::uint32_t observed = 0;  // 0: none yet
  bool backward_ran = false;
  std::vector<StorageEvidence> storage;                // groups that keep growing
  std::map<std::uint32_t, GraphEvidence> graph_roots;  // root sites whose graphs keep surviving
  // The alive root nodes of those graphs (only when asked for: they are kept alive by this), and
  // the root site each was sampled under.
  std::vector<track::NodeRef> alive_roots;
  std::vector<std::uint32_t> alive_root_sites;
  // Tracked tensor memory grows steadily but no group explains it (survivors spread thinly over
  // sites): the groups holding most of what was retained after warm-up.
  double unexplained_tensor_growth = 0;
  std::vector<StorageEvidence> growth_contributors;
  double resident_slope = 0;    // bytes per step after warm-up, for graph findings
  double untracked_growth = 0;  // resident growth beyond what tensors and graphs explain
  bool private_memory = false;  // the resident memory judged is private memory (a forked child)
  double explained_growth = 0;  // what they explain
  std::int64_t nodes_per_step = 0;
  std::uint32_t graph_sampled_steps = 0;  // watched steps whose graph nodes were sampled
  std::int64_t graph_samples_alive = 0;   // sampled nodes of those steps still alive
  // Graph root sites with survivors from two or more watched steps of their segment: worth
  // watching every step for a while, so a build-up is seen step by step.
  bool graphs_suspected = false;
  // Every group with survivors (growing or not), for RetentionHistory: what a build-up still
  // holds. Points into `census` and `node_groups`.
  std::vector<GroupAtBoundary> groups;
  analyze::SurvivorCensus census;
  std::map<std::uint32_t, NodeGroup> node_groups;

  LeakEvidence() = default;
  // `groups` points into `census` and `node_groups`: a move keeps their nodes, a copy would not.
  LeakEvidence(const LeakEvidence&) = delete;
  LeakEvidence& operator=(const LeakEvidence&) = delete;
  LeakEvidence(LeakEvidence&&) = default;
  LeakEvidence& operator=(LeakEvidence&&) = default;

  bool leak() const {
    return !storage.empty() || !graph_roots.empty() || unexplained_tensor_growth > 0 ||
           untracked_growth > 0;
  }
};

struct EvidenceInputs {
  std::uint32_t warmup = 0;
  std::uint32_t current_step = 0;  // the step now running; steps before it are complete
  const std::vector<StepSample>* per_step = nullptr;
  // The samples of the boundaries that read resident memory, in step order (null: per_step's).
  const std::vector<StepSample>* resident_readings = nullptr;
  // The thinned series of those two kept from the last renewal (null: read afresh).
  RunSeriesCache* per_step_series = nullptr;
  RunSeriesCache* resident_series = nullptr;
  GraphNodeSampler* nodes = nullptr;  // null: graph nodes not watched
  bool backward_ran = false;
  bool watch_resident_memory = true;
  bool keep_graph_roots = false;       // for a report: the retained graphs are walked then
  const StepPhases* phases = nullptr;  // null: one phase
  // Ops watched on every step: backward is then known step by step (StepPhases::markBackward),
  // and the category of what a group holds follows the steps that made it.
  bool every_step_watched = false;
  const RetentionHistory* history = nullptr;  // null: every group judged from warm-up on
  // Resident memory is the process's private memory (DetectorOptions::forked_from_pid).
  bool private_memory = false;
};

// Applies the growth rules to the survivors, the sampled graph nodes and resident memory.
LeakEvidence gatherEvidence(const EvidenceInputs& inputs);

// Resident memory that retained graphs of `nodes_per_step` nodes a step cost outside tensor
// storage (their nodes and autograd metadata), estimated generously.
double graphNodesCostPerStep(std::int64_t nodes_per_step);
// Whether resident growth beside other findings is a leak of its own: faster than malloc's noise,
// and beyond what their native cost explains (`their_cost_per_step`, which the real cost may
// exceed by up to twice).
bool untrackedBeyondOtherFindings(double untracked_per_step, double their_cost_per_step);

}  // namespace memseal::detect
