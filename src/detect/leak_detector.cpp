// The leak detector's public face: it numbers steps, samples totals at every step boundary, and
// asks detect/evidence for a verdict; the report puts the evidence into findings. Memory it keeps:
// the live table (bounded by what the program itself keeps alive), the graph-node samples (bounded,
// see graph_nodes.h) and one StepSample per step, thinned past StepRecords::kMaxStepSamples.
#include "memseal/leak_detector.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/policy.h"
#include "common/text.h"
#include "detect/boundary_schedule.h"
#include "detect/built_findings.h"
#include "detect/device_findings.h"
#include "detect/device_summary.h"
#include "detect/evidence.h"
#include "detect/finding_order.h"
#include "detect/findings.h"
#include "detect/graph_nodes.h"
#include "detect/held_causes.h"
#include "detect/program_end.h"
#include "detect/retention_history.h"
#include "detect/step_phases.h"
#include "detect/step_records.h"
#include "detect/verdict_renewals.h"
#include "track/collected_frees.h"
#include "track/device_events.h"
#include "track/grad_fn_observer.h"
#include "track/python_frames.h"
#include "track/session.h"

namespace memseal {

using detect::addHeldCause;
using detect::causeKey;
using detect::HeldCause;
using detect::sameCause;

namespace {

// With ops watched automatically, every step is watched this long after warm-up, so a verdict
// (which needs 4 of them) is clear within 10 steps; then the loop's repetition is trusted.
constexpr std::uint32_t kWatchedStepsAfterWarmup = 10;
TrackerOptions detectorDefaults() {
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOn;
  defaults.watch_ops = OpWatching::automatic();
  return defaults;
}

}  // namespace

LeakError::LeakError(LeakReport report)
    : std::runtime_error("memseal found a memory leak:\n" + report.toText()),
      report_(std::move(report)) {}

struct LeakDetector::State {
  DetectorOptions options;
  Tracker tracker;
  std::unique_ptr<detect::GraphNodeSampler> nodes;
  detect::StepRecords records;
  detect::VerdictRenewals renewals;
  std::uint32_t current_step = 0;  // the step now running
  std::uint64_t backward_at_warmup_end = 0;
  bool warmup_done = false;
  bool last_verdict = false;
  std::optional<std::uint32_t> leak_since;
  bool finished = false;
  std::string graph_nodes_unwatched;  // why, when they were not
  // Phases of the steps, and build-ups of memory freed together (a phase's end, a reset).
  detect::StepPhases phases;
  std::uint64_t backward_at_step_start = 0;
  detect::RetentionHistory history;
  detect::BuiltFindings built;
  bool findings_due = false;  // a refresh that had to wait (see refreshBuiltFindings)
  std::vector<detect::HeldCause> held;
  bool watch_every_step = false;    // ops of every step, since graphs built up and were freed
  bool every_step_watched = false;  // the options watch every step's ops

  State(DetectorOptions detector_options, const TrackerOptions& resolved)
      : options(std::move(detector_options)),
        tracker(resolved),
        records(options.forked_from_pid != 0
                    ? detect::ResidentMemoryReader::Measure::kPrivatePages
                    : detect::ResidentMemoryReader::Measure::kResidentSet) {}

  // Warm-up and the steps after it, a suspected leak, and a build-up half freed at the last
  // renewal (the next tells whether the rest went with it): every boundary reads resident memory
  // and renews the verdict.
  bool verdictForming() const {
    return current_step <= options.warmup + kWatchedStepsAfterWarmup || last_verdict ||
           history.anyFalling();
  }

  // What the boundary of `sample` shows that a renewal is compared with.
  detect::VerdictRenewals::Boundary boundary(const StepSample& sample) const {
    return {sample, records.residentHigh(), nodes ? nodes->linkedSteps() : 0,
            track::deviceEventsSeen()};
  }

  // Whether the renewal at the boundary of `sample` finds more tracked memory than every renewal
  // since warm-up did.
  bool newTrackedHigh(const StepSample& sample) {
    if (!warmup_done) return false;
    return renewals.newTrackedHigh(sample.live_bytes + detect::deviceAllocatedBytes());
  }

  bool backwardRan() const {
    return warmup_done && track::backwardFunctionsRun() > backward_at_warmup_end;
  }

  detect::LeakEvidence evidence(bool for_report = false) const {
    detect::EvidenceInputs inputs;
    inputs.warmup = options.warmup;
    inputs.current_step = current_step;
    inputs.per_step = &records.perStep();
    inputs.resident_readings = &records.residentReadings();
    inputs.per_step_series = records.perStepSeries();
    inputs.resident_series = records.residentSeries();
    inputs.nodes = nodes.get();
    inputs.backward_ran = backwardRan();
    inputs.watch_resident_memory = options.watch_resident_memory;
    inputs.keep_graph_roots = for_report;
    inputs.phases = &phases;
    inputs.history = &history;
    inputs.every_step_watched = every_step_watched;
    inputs.private_memory = options.forked_from_pid != 0;
    return detect::gatherEvidence(inputs);
  }

  // The findings of build-ups, made while they are held (detect/built_findings.h). A finding names
  // Python frames, which takes the GIL: on a thread that cannot take it now (an op inside
  // backward, which runs without it, while the caller of step() holds a lock the GIL's holder may
  // wait for) the refresh waits for the next step or report.
  void refreshBuiltFindings(const detect::LeakEvidence& evidence) {
    if (!findings_due && !built.needed(evidence)) return;
    findings_due = !track::pythonFramesReadableNow();
    if (findings_due) return;
    refreshBuiltFindingsNow();
  }

  void refreshBuiltFindingsNow() {
    findings_due = false;
    built.refresh(this->evidence(/*for_report=*/true));
  }

  std::vector<HeldCause> heldCauses(const std::vector<detect::Collapse>& collapses) const {
    return built.heldCauses(collapses, history, phases, records);
  }

  // Whether `cause`, freed as its program ended, was held all along: it began in the first run of
  // its phase and no build-up of it was freed before. One of a phase begun again, or after an
  // earlier build-up was freed (a reset), was a phase's and ended with it, as those freed at a
  // boundary while the program ran did.
  bool heldAllAlong(const HeldCause& cause) const {
    return phases.inFirstRunOfItsPhase(cause.finding.freed->first_step) && !cause.freed_before &&
           !cause.by_collector && cause.finding.freed->times <= 1;
  }

  // Build-ups the program freed as it ended, held all along (heldAllAlong): findings as at the
  // last boundary that saw them held. Those freed since the last boundary (a report at exit, after
  // the program freed what its loop held), and with `loop_ended_at` those found freed at the
  // boundaries from that step on whose growth was judged kSettledSteps or more before they went
  // (not the last requests a server had in flight as its loop ended). `all_held` keeps the other
  // held causes.
  void addFindingsHeldToTheEnd(LeakReport& report, const detect::LeakEvidence& evidence,
                               std::optional<std::uint32_t> loop_ended_at,
                               std::vector<HeldCause>& all_held,
                               std::optional<std::uint32_t>& held_detected) const {
    std::vector<HeldCause> freed_at_end;
    auto known = [&](const HeldCause& cause) {
      return std::any_of(report.findings.begin(), report.findings.end(),
                         [&](const LeakFinding& f) { return causeKey(f) == cause.key; });
    };
    for (const HeldCause& cause : held) {
      const HeldUntilFreed& freed = *cause.finding.freed;
      bool at_end = loop_ended_at && freed.freed_at_step >= *loop_ended_at &&
                    freed.freed_at_step >= cause.detected_at + detect::kSettledSteps;
      (at_end && !known(cause) ? freed_at_end : all_held).push_back(cause);
    }
    for (HeldCause& cause : heldCauses(history.collapsedSince(evidence.groups, current_step))) {
      if (!known(cause)) freed_at_end.push_back(std::move(cause));
    }
    for (HeldCause& cause : freed_at_end) {
      if (!heldAllAlong(cause)) {
        addHeldCause(all_held, std::move(cause));
        continue;
      }
      held_detected = std::min(held_detected.value_or(cause.detected_at), cause.detected_at);
      cause.finding.freed.reset();
      // The same site, read without its Python line after Python finalised: what is left of the
      // build-up, which the cause as recorded while it was held describes whole.
      report.findings.erase(
          std::remove_if(report.findings.begin(), report.findings.end(),
                         [&](const LeakFinding& f) { return sameCause(f, cause); }),
          report.findings.end());
      report.findings.push_back(std::move(cause.finding));
    }
  }

  LeakReport buildReport(std::optional<std::uint32_t> loop_ended_at = std::nullopt) const {
    LeakReport report;
    report.steps = current_step;
    report.warmup = options.warmup;
    report.per_step = records.perStep();
    report.backward_ran = backwardRan();
    report.graph_nodes_unwatched = graph_nodes_unwatched;
    report.rank = rankFromEnvironment();  // a rank of a distributed job (torchrun's variables)
    report.origin.forked_from_pid = options.forked_from_pid;
    detect::LeakEvidence evidence = this->evidence(/*for_report=*/true);
    report.findings = detect::buildFindings(evidence);
    std::vector<HeldCause> all_held;
    std::optional<std::uint32_t> held_detected;
    addFindingsHeldToTheEnd(report, evidence, loop_ended_at, all_held, held_detected);
    for (const HeldCause& cause : all_held) {
      if (cause.by_collector) {
        // Garbage, and a build-up of it still held is garbage waiting for the collector; unless
        // the program freed some of the cause's build-ups itself.
        if (std::any_of(all_held.begin(), all_held.end(), [&](const HeldCause& other) {
              return other.key == cause.key && !other.by_collector;
            })) {
          continue;
        }
        auto current = std::find_if(report.findings.begin(), report.findings.end(),
                                    [&](const LeakFinding& f) { return sameCause(f, cause); });
        bool again = current != report.findings.end();
        if (again) report.findings.erase(current);
        report.freed_build_ups.push_back(cause.finding);
        report.freed_build_ups.back().freed->by_collector = true;
        report.freed_build_ups.back().freed->building_up = again;
        continue;
      }
      if (cause.finding.category == LeakCategory::kTensorsRetained) {
        report.freed_build_ups.push_back(cause.finding);
        continue;
      }
      auto current = std::find_if(report.findings.begin(), report.findings.end(),
                                  [&](const LeakFinding& f) { return sameCause(f, cause); });
      if (current != report.findings.end()) {
        // A sawtooth building up again: one finding, as it is now, with its earlier build-ups.
        current->freed = cause.finding.freed;
        current->freed->building_up = true;
      } else {
        report.findings.push_back(cause.finding);
      }
      held_detected = std::min(held_detected.value_or(cause.detected_at), cause.detected_at);
    }
    detect::dropGrowthOfGraphsBroughtBack(evidence, report.findings);
    std::int64_t held_free = records.resident().heldFreeGrowth();
    bool leak_cost = detect::chargeHeldFreeToKeptGraphs(
        held_free >= detect::ResidentMemoryReader::kHeldFreeNoteBytes ? held_free : 0,
        current_step - std::min(current_step, options.warmup), report.findings);
    report.malloc_free = records.resident().mallocFree(leak_cost);
    detect::orderFindings(report.findings);
    detect::mergeFindingsOfOneCause(report.findings);
    report.devices = detect::summarizeDevices(options.warmup);
    detect::addDeviceFindings(options.warmup, report);
    report.leak = !report.findings.empty();
    if (report.leak) report.detected_at_step = leak_since ? leak_since : held_detected;
    if (!phases.several()) {
      for (StepSample& sample : report.per_step) sample.phase = 0;  // one phase, none listed
    } else {
      std::vector<detect::StepPhases::Summary> summaries = phases.summaries(current_step);
      std::map<std::string, std::uint32_t> index;
      for (const detect::StepPhases::Summary& summary : summaries) {
        index.emplace(summary.name, static_cast<std::uint32_t>(report.phases.size()));
        report.phases.push_back(PhaseSummary{summary.name, summary.first_step, summary.steps,
                                             summary.runs, summary.backward_ran});
      }
      for (StepSample& sample : report.per_step) {
        // From the phases as they are now: steps may have been relabelled since.
        auto found = index.find(phases.name(phases.phaseOf(sample.step)));
        sample.phase = found == index.end() ? 0 : found->second;
      }
      if (phases.runsLimited()) {
        report.phase_changes_capped_at = detect::StepPhases::kMaxRuns;
      }
    }
    return report;
  }

  void stopWatching() {
    if (nodes) track::setGradFnObserver(nullptr);
    tracker.stop();
  }
};

LeakDetector::LeakDetector(DetectorOptions options) {
  if (options.on_leak == ReportPolicy::kCallback && !options.on_leak_callback) {
    throw std::invalid_argument("memseal: ReportPolicy::kCallback needs on_leak_callback");
  }
  TrackerOptions resolved = options.tracker.resolved(detectorDefaults());
  std::string graph_nodes_unwatched;
  if (options.watch_graph_nodes &&
      (resolved.watch_ops->mode == OpWatching::Mode::kOff || !*resolved.record_tensor_metadata)) {
    // Graph nodes are seen on op outputs.
    options.watch_graph_nodes = false;
    graph_nodes_unwatched = resolved.watch_ops->mode == OpWatching::Mode::kOff
                                ? "ops not watched"
                                : "tensor metadata off";
  }
  std::uint32_t warmup = options.warmup;
  state_ = std::make_unique<State>(std::move(options), resolved);
  state_->every_step_watched = resolved.watch_ops->mode == OpWatching::Mode::kEveryStep;
  state_->graph_nodes_unwatched = std::move(graph_nodes_unwatched);
  setStep(0);
  state_->tracker.start();
  track::watchEveryStepUntil(warmup + kWatchedStepsAfterWarmup);
  if (state_->options.watch_graph_nodes) {
    state_->nodes = std::make_unique<detect::GraphNodeSampler>(warmup);
    track::setGradFnObserver(state_->nodes.get());
  }
}

void LeakDetector::watchOps(const OpWatching& watching) {
  // Whether backward ran where survivors were made stays judged step by step when the detector
  // began with every step watched: a change to OpWatching::automatic() still watches one step in
  // 32 at least, and StepPhases::markBackward bridges up to 64 unwatched steps within a run.
  track::setSessionOpWatching(watching);
}

LeakDetector::~LeakDetector() {
  if (!state_->finished) state_->stopWatching();
}

void LeakDetector::step() {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::step() after finish()");
  StepSample sample;
  sample.step = state.current_step;
  std::uint64_t backward_now = track::backwardFunctionsRun();
  if (backward_now > state.backward_at_step_start) state.phases.markBackward(sample.step);
  state.backward_at_step_start = backward_now;
  DeviceStats stats = state.tracker.stats();
  sample.live_bytes = stats.live_bytes;
  sample.live_count = stats.live_count;
  std::int64_t boundary_ns = detect::steadyNowNs();
  state.records.readResidentMemory(sample, boundary_ns, state.verdictForming(), state.warmup_done);
  ++state.current_step;
  if (!state.warmup_done && state.current_step >= state.options.warmup) {
    state.warmup_done = true;
    state.backward_at_warmup_end = track::backwardFunctionsRun();
  }
  setStep(state.current_step);
  // Graph nodes alive are counted where the verdict is renewed; carried over on the boundaries in
  // between.
  state.records.add(sample);
  detect::VerdictRenewals::Boundary boundary = state.boundary(sample);
  if (!state.renewals.due(boundary, state.current_step, state.verdictForming(), boundary_ns)) {
    return;
  }
  std::int64_t renewal_start_ns = detect::steadyNowNs();
  detect::LeakEvidence evidence = state.evidence();
  state.records.setGraphNodesAlive(evidence.graph_samples_alive);
  std::vector<detect::Collapse> collapses =
      state.history.update(evidence.groups, state.current_step);
  for (const detect::Collapse& collapse : collapses) {
    // Graphs built up and freed: the next build-up is seen step by step only if every step's ops
    // are watched (graph nodes are seen on watched steps).
    if (collapse.id.graph) state.watch_every_step = true;
  }
  for (HeldCause& cause : state.heldCauses(collapses)) addHeldCause(state.held, std::move(cause));
  state.built.forgetGroupsNotBuildingUp(state.history);
  state.refreshBuiltFindings(evidence);
  // Graphs of two or more watched steps alive: watch every step for a while, so a build-up (or
  // its end) is seen step by step rather than one step in N.
  if (evidence.graphs_suspected || state.watch_every_step) {
    track::watchEveryStepUntil(state.current_step + kWatchedStepsAfterWarmup);
  }
  // Tracked memory above its every renewal since warm-up: perhaps a build-up beginning. Its graphs
  // are seen on watched steps only, which a long healthy stretch spreads up to 512 steps apart:
  // they come one interval apart again, so a graph kept from here on is seen on two of them soon.
  if (state.newTrackedHigh(sample)) track::watchAtFirstInterval();
  bool verdict = evidence.leak();
  if (verdict && !state.last_verdict) state.leak_since = sample.step;
  if (!verdict) state.leak_since.reset();
  state.last_verdict = verdict;
  state.renewals.noteRenewal(state.boundary(sample), state.current_step, evidence.graphs_suspected,
                             renewal_start_ns, detect::steadyNowNs());
}

void LeakDetector::phase(const std::string& name, std::uint32_t steps_back) {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::phase() after finish()");
  state.phases.begin(state.current_step - std::min(steps_back, state.current_step), name);
  // A phase's first steps are watched as a new session's are: its ops are not the last phase's.
  track::watchEveryStepUntil(state.current_step + kWatchedStepsAfterWarmup);
}

LeakReport LeakDetector::report() const {
  // A report names Python frames anyway: a refresh that had to wait is done first.
  if (state_->findings_due && !state_->finished) state_->refreshBuiltFindingsNow();
  return state_->buildReport();
}

LeakReport LeakDetector::report(std::uint32_t loop_ended_at) const {
  if (state_->findings_due && !state_->finished) state_->refreshBuiltFindingsNow();
  return state_->buildReport(loop_ended_at);
}

LeakReport LeakDetector::finish() {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::finish() called twice");
  LeakReport report = state.buildReport();
  state.stopWatching();
  state.finished = true;
  if (!report.leak) return report;
  common::applyPolicy<LeakError>(state.options.on_leak, report, state.options.on_leak_callback);
  return report;
}

}  // namespace memseal
