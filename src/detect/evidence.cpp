// Resident growth is explained first by what the other evidence retains: tracked tensor bytes
// (subtracted sample by sample), plus the native memory behind each retained tensor (TensorImpl,
// StorageImpl, autograd metadata) and each retained graph's nodes, estimated generously. Only what
// remains is untracked growth, so a graph leak is never also reported as a native one.
#include "detect/evidence.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "detect/growth_criterion.h"
#include "detect/resident_memory.h"
#include "detect/run_series.h"

namespace memseal::detect {

namespace {

// Resident growth below this per step, judged over recent steps, is noise from malloc arenas and
// page-granular accounting; slower growth must hold over a long run (unboundedGrowthPerStep).
constexpr double kMinFastResidentBytesPerStep = 64 * 1024;
constexpr std::size_t kResidentWindow = 256;
constexpr double kMinSlowResidentTotalBytes = 1024 * 1024;
// Native memory behind one retained tensor and one retained graph node, measured on libtorch 2.11
// (bench/python/native_cost.py, in BENCHMARKS.md): a tensor kept in a Python list costs 450-540 B
// beyond its storage, up to 1.8 KiB for large ones that malloc maps on pages of their own; a node
// of a retained graph about 1.35 KiB. Rounded up, so what a leak of tensors or graphs costs outside
// tensor storage is not taken for another leak.
constexpr double kNativeBytesPerRetainedTensor = 2048;
constexpr double kNativeBytesPerGraphNode = 1536;
// Beside retained tensors, resident growth is another leak only when it is at least this large a
// share of the growth they explain. Measured (bench/python/native_cost.py): a forward hook keeping
// each 4 KiB layer input while the layers' other outputs come and go grew resident memory by 20 KiB
// per 12 KiB kept, two thirds beyond the tensors and their metadata (malloc's holes between kept
// and freed blocks). A smaller native leak beside a tensor leak is found once that leak is fixed.
constexpr double kUntrackedShareOfExplained = 1.0;
constexpr std::size_t kMaxGrowthContributors = 8;
// A phase with fewer samples in the run's series than this is not judged on its own (below it,
// steadyTensorGrowthPerStep calls nothing steady).
constexpr std::size_t kMinPhaseSamplesForGrowth = 8;

// Where a group's judgement starts: after warm-up; after its last build-up was freed, at its first
// survivor since (the next build-up of a reset total starts there, and the boundary that saw the
// reset may come a few steps after it); and, when the steps have phases, at the start of the run
// of the phase its oldest survivor was made in (a phase begun again, the next epoch's training, is
// where a new build-up of what it keeps starts).
std::uint32_t segmentStartOf(const EvidenceInputs& inputs, const GroupId& id,
                             const std::vector<std::uint32_t>& alive_steps,
                             std::uint32_t first_step) {
  std::uint32_t freed_before = inputs.history != nullptr ? inputs.history->segmentStart(id) : 0;
  std::uint32_t start = std::max(first_step, freed_before);
  auto oldest = std::lower_bound(alive_steps.begin(), alive_steps.end(), start);
  if (oldest == alive_steps.end()) return start;
  if (freed_before > 0) start = *oldest;
  if (inputs.phases == nullptr || !inputs.phases->several()) return start;
  return std::max(start, inputs.phases->runStartOf(*oldest));
}

// Whether backward ran where a group's survivors were made, for its category: in most of those
// steps when every step's ops are watched (so a validation pass's first steps, taken as
// training's until its loop was told apart, do not make it training), else in the phase that
// made most of them.
bool backwardRanFor(const EvidenceInputs& inputs, const std::vector<std::uint32_t>& alive) {
  if (inputs.every_step_watched) return inputs.phases->backwardRanInMostOf(alive);
  return inputs.phases->backwardRan(phaseBit(inputs.phases->mainPhaseOf(alive)));
}

struct Judgement {
  std::vector<std::uint32_t> positions;  // of the steps with survivors, among the judged steps
  std::uint32_t steps = 0;               // the judged steps
  bool backward_ran = false;
};

// A storage group's survivors against the steps of their phases, from the group's segment start
// to the last completed step.
Judgement judge(const EvidenceInputs& inputs, const GroupId& id,
                const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                std::uint32_t last_step) {
  Judgement judgement;
  std::uint32_t start = segmentStartOf(inputs, id, alive_steps, first_step);
  if (start > last_step) return judgement;
  auto begin = std::lower_bound(alive_steps.begin(), alive_steps.end(), start);
  std::vector<std::uint32_t> alive(begin, alive_steps.end());
  if (inputs.phases == nullptr || !inputs.phases->several()) {
    for (std::uint32_t step : alive) judgement.positions.push_back(step - start);
    judgement.steps = last_step - start + 1;
    judgement.backward_ran = inputs.backward_ran;
    return judgement;
  }
  PhaseSet phases = inputs.phases->phasesOf(alive);
  judgement.positions = inputs.phases->positionsOf(alive, phases, start, last_step);
  judgement.steps = inputs.phases->stepsIn(phases, start, last_step);
  judgement.backward_ran = backwardRanFor(inputs, alive);
  return judgement;
}

// What every tensor made after warm-up and still alive holds, whether or not its group is judged
// growing now (a loop's survivors at the program's exit, a cache's entries).
struct CensusTotals {
  std::int64_t bytes = 0;
  std::int64_t count = 0;
};

// Tracked tensor memory of the whole run, growing steadily (steadyTensorGrowthPerStep). Where the
// steps changed phase, each phase's boundaries see its own working set (an evaluation pass's hold
// the last training step's gradients, which a training step's boundary after zero_grad() does
// not), and a run that ends in the phase with more at its boundaries rises without growing: the
// growth must show within the steps of a phase too, in one of those with enough of them to judge.
double wholeTensorGrowthPerStep(const EvidenceInputs& inputs, const RunSeries& series) {
  double growth = steadyTensorGrowthPerStep(series.steps, series.live);
  if (growth <= 0 || inputs.phases == nullptr || !inputs.phases->several()) return growth;
  std::map<std::uint32_t, std::pair<std::vector<std::uint32_t>, std::vector<std::int64_t>>>
      by_phase;
  for (std::size_t i = 0; i < series.steps.size() && i < series.live.size(); ++i) {
    auto& points = by_phase[inputs.phases->phaseOf(series.steps[i])];
    points.first.push_back(series.steps[i]);
    points.second.push_back(series.live[i]);
  }
  bool judged = false;
  for (const auto& [phase, points] : by_phase) {
    if (points.first.size() < kMinPhaseSamplesForGrowth) continue;
    judged = true;
    if (steadyTensorGrowthPerStep(points.first, points.second) > 0) return growth;
  }
  return judged ? 0 : growth;
}

// Tensor storage: groups whose survivors keep coming; while tracked memory as a whole grows
// steadily, also groups that retain on some steps only. Each group is judged over the steps of
// its own phases, from the step after its last build-up was freed.
CensusTotals judgeStorage(const EvidenceInputs& inputs, const RunSeries& series,
                          std::int64_t turnover_bytes, LeakEvidence& evidence) {
  double tensor_growth = wholeTensorGrowthPerStep(inputs, series);
  evidence.census = analyze::takeSurvivorCensus(evidence.first_step, evidence.last_step);
  // Growth of the whole that caches turning over can hold all of is their filling, not a leak: a
  // leak beside a full cache grows the whole beyond what the cache holds.
  if (turnover_bytes > 0 && !series.live.empty() &&
      series.live.back() - series.live.front() <= turnover_bytes) {
    tensor_growth = 0;
  }
  CensusTotals totals;
  for (const auto& [key, group] : evidence.census.groups) {
    totals.bytes += group.bytes;
    totals.count += group.count;
  }
  for (auto& [key, group] : evidence.census.groups) {
    GroupAtBoundary at;
    at.id = GroupId{false, key};
    at.steps = &group.steps;
    at.bytes = group.bytes;
    Judgement judged = judge(inputs, at.id, group.steps, evidence.first_step, evidence.last_step);
    at.judged_steps = judged.steps;
    at.grows = judged.steps > 0 &&
               (survivorsKeepGrowing(judged.positions, 0, judged.steps - 1) ||
                (tensor_growth > 0 && survivorsSpanTheRun(judged.positions, 0, judged.steps - 1)));
    if (inputs.history != nullptr && inputs.history->turnsOver(at.id)) {
      at.grows = false;  // a cache that evicts: entries replaced, not added
    }
    if (at.grows) evidence.storage.push_back({key, group, judged.steps, judged.backward_ran});
    evidence.groups.push_back(at);
  }
  std::sort(evidence.storage.begin(), evidence.storage.end(),
            [](const StorageEvidence& a, const StorageEvidence& b) { return a.key < b.key; });
  if (tensor_growth > 0 && evidence.storage.empty()) {
    // Growth no group explains: name the groups holding most of what was kept.
    for (auto& [key, group] : evidence.census.groups) {
      evidence.growth_contributors.push_back({key, group, evidence.observed, inputs.backward_ran});
    }
    std::sort(evidence.growth_contributors.begin(), evidence.growth_contributors.end(),
              [](const StorageEvidence& a, const StorageEvidence& b) {
                return a.group.bytes > b.group.bytes;
              });
    if (evidence.growth_contributors.size() > kMaxGrowthContributors) {
      evidence.growth_contributors.resize(kMaxGrowthContributors);
    }
    if (!evidence.growth_contributors.empty()) evidence.unexplained_tensor_growth = tensor_growth;
  }
  return totals;
}

// Graph nodes, judged against the watched steps whose samples are kept (thinned on long runs), of
// the group's phases and segment.
void judgeGraphs(const EvidenceInputs& inputs, LeakEvidence& evidence) {
  NodeEvidence nodes =
      inputs.nodes->evidence(evidence.first_step, evidence.last_step, inputs.keep_graph_roots);
  const std::vector<std::uint32_t>& sampled = nodes.sampled_steps;
  evidence.graph_sampled_steps = static_cast<std::uint32_t>(sampled.size());
  evidence.node_groups = std::move(nodes.groups_by_root_site);
  for (auto& [site, group] : evidence.node_groups) {
    GroupAtBoundary at;
    at.id.graph = true;
    at.id.key.site = site;
    at.steps = &group.steps;
    std::uint32_t start = segmentStartOf(inputs, at.id, group.steps, evidence.first_step);
    auto alive_begin = std::lower_bound(group.steps.begin(), group.steps.end(), start);
    std::vector<std::uint32_t> alive(alive_begin, group.steps.end());
    PhaseSet phases = inputs.phases != nullptr ? inputs.phases->phasesOf(alive) : ~PhaseSet{0};
    // The watched steps of those phases in the segment, and where the alive ones are among them.
    std::vector<std::uint32_t> positions;
    std::uint32_t judged = 0;
    for (std::uint32_t step : sampled) {
      if (step < start) continue;
      if (inputs.phases != nullptr && inputs.phases->several() &&
          (phaseBit(inputs.phases->phaseOf(step)) & phases) == 0) {
        continue;
      }
      if (std::binary_search(alive.begin(), alive.end(), step)) positions.push_back(judged);
      ++judged;
    }
    at.judged_steps = judged;
    at.grows = judged > 0 && survivorsKeepGrowing(positions, 0, judged - 1);
    if (positions.size() >= 2) evidence.graphs_suspected = true;
    if (at.grows) {
      bool backward = inputs.phases != nullptr && inputs.phases->several()
                          ? backwardRanFor(inputs, alive)
                          : inputs.backward_ran;
      evidence.graph_roots.emplace(site, GraphEvidence{group, judged, backward});
    }
    evidence.groups.push_back(at);
  }
  for (auto& [site, root] : nodes.roots) {
    if (evidence.graph_roots.count(site) != 0) {
      evidence.alive_roots.push_back(std::move(root));
      evidence.alive_root_sites.push_back(site);
    }
  }
  evidence.nodes_per_step = inputs.nodes->nodesPerStep();
  evidence.graph_samples_alive = nodes.alive_samples;
}

// Resident memory beyond what tracked tensors, their native cost and graph nodes explain.
// `series`: every boundary's sample; `readings`: those of the boundaries that read resident memory.
void judgeResident(const RunSeries& series, const RunSeries& readings, const CensusTotals& census,
                   std::int64_t turnover_bytes, LeakEvidence& evidence) {
  evidence.resident_slope = std::max(0.0, slopeWithoutOneJump(readings.steps, readings.resident));
  // Every surviving tensor costs its native memory.
  double overhead =
      kNativeBytesPerRetainedTensor * static_cast<double>(census.count) / evidence.observed;
  // Retained graphs cost their nodes, whether the sampler saw them kept or a growing group of
  // tensors with autograd history keeps them (a list of losses: the tensors are a few bytes, the
  // graphs behind them are the growth).
  bool graphs_kept =
      !evidence.graph_roots.empty() ||
      std::any_of(evidence.storage.begin(), evidence.storage.end(), withAutogradHistory) ||
      std::any_of(evidence.growth_contributors.begin(), evidence.growth_contributors.end(),
                  withAutogradHistory);
  if (graphs_kept) overhead += graphNodesCostPerStep(evidence.nodes_per_step);
  auto residualOf = [&](std::uint32_t step, std::int64_t resident, std::int64_t live) {
    return resident - live - static_cast<std::int64_t>(overhead * (step - evidence.first_step));
  };
  std::vector<std::uint32_t> recent_steps;
  std::vector<std::int64_t> recent;
  for (std::size_t i = readings.count > kResidentWindow ? readings.count - kResidentWindow : 0;
       i < readings.count; ++i) {
    const StepSample& sample = readings.recent[i];
    recent_steps.push_back(sample.step);
    recent.push_back(residualOf(sample.step, sample.resident_bytes, sample.live_bytes));
  }
  double fast = steadyGrowthPerStep(recent_steps, recent, kMinFastResidentBytesPerStep);
  bool other_findings = !evidence.storage.empty() || !evidence.graph_roots.empty() ||
                        evidence.unexplained_tensor_growth > 0;
  evidence.explained_growth = std::max(0.0, slopeOf(series.steps, series.live)) + overhead;
  if (other_findings) {
    evidence.untracked_growth = untrackedBeyondOtherFindings(fast, overhead) ? fast : 0;
  } else {
    // The slow rule splits the run into segments by sample: it takes every boundary, those between
    // two readings carrying the earlier one, so that the readings of the watched start (one per
    // boundary, then one in up to 8) do not fill its first segments.
    std::vector<std::int64_t> residual(series.resident.size());
    for (std::size_t i = 0; i < series.resident.size(); ++i) {
      residual[i] = residualOf(series.steps[i], series.resident[i], series.live[i]);
    }
    evidence.untracked_growth =
        std::max(fast, unboundedGrowthPerStep(series.steps, residual, kMinSlowResidentTotalBytes));
  }
  // Tensors kept between short-lived ones leave holes malloc cannot always fill: resident memory
  // beside the tensors retained since warm-up grows by up to their own growth again
  // (kUntrackedShareOfExplained).
  double retained_growth = static_cast<double>(census.bytes) / evidence.observed + overhead;
  if (evidence.untracked_growth < kUntrackedShareOfExplained * retained_growth) {
    evidence.untracked_growth = 0;
  }
  // Entries of ever-new sizes replaced in a cache that turns over leave holes malloc cannot
  // always reuse: resident growth up to what such caches hold is that fragmentation.
  double span = static_cast<double>(evidence.last_step - evidence.first_step + 1);
  if (evidence.untracked_growth > 0 &&
      evidence.untracked_growth * span <= static_cast<double>(turnover_bytes)) {
    evidence.untracked_growth = 0;
  }
}

}  // namespace

double graphNodesCostPerStep(std::int64_t nodes_per_step) {
  return kNativeBytesPerGraphNode * static_cast<double>(nodes_per_step);
}

bool untrackedBeyondOtherFindings(double untracked_per_step, double their_cost_per_step) {
  return untracked_per_step > 0 &&
         untracked_per_step >= std::max(kMinFastResidentBytesPerStep, 2 * their_cost_per_step);
}

LeakEvidence gatherEvidence(const EvidenceInputs& inputs) {
  LeakEvidence evidence;
  if (inputs.current_step <= inputs.warmup) return evidence;
  evidence.first_step = inputs.warmup;
  evidence.last_step = inputs.current_step - 1;
  evidence.observed = evidence.last_step - evidence.first_step + 1;
  evidence.backward_ran = inputs.backward_ran;
  evidence.private_memory = inputs.private_memory;
  // The whole-run rules look at kMaxRunSamples samples at most, so a renewal costs the same on the
  // 20th step as on the 20,000th.
  RunSeriesCache fresh_series;
  RunSeriesCache& series_cache = inputs.per_step_series ? *inputs.per_step_series : fresh_series;
  RunSeries series = series_cache.series(*inputs.per_step, evidence.first_step, evidence.last_step);
  std::int64_t turnover_bytes = inputs.history != nullptr ? inputs.history->turnoverPeakBytes() : 0;
  CensusTotals census = judgeStorage(inputs, series, turnover_bytes, evidence);
  if (inputs.nodes != nullptr) judgeGraphs(inputs, evidence);
  if (inputs.watch_resident_memory && kResidentMemoryMeaningful) {
    RunSeriesCache fresh_readings;
    RunSeriesCache& readings_cache =
        inputs.resident_series ? *inputs.resident_series : fresh_readings;
    RunSeries readings = inputs.resident_readings != nullptr
                             ? readings_cache.series(*inputs.resident_readings, evidence.first_step,
                                                     evidence.last_step)
                             : series;
    if (!readings.resident.empty()) {
      judgeResident(series, readings, census, turnover_bytes, evidence);
    }
  }
  return evidence;
}

}  // namespace memseal::detect
