// The leak detector's public face: it numbers steps, samples totals at every step boundary, and
// asks detect/evidence for a verdict; the report puts the evidence into findings. Memory it keeps:
// the live table (bounded by what the program itself keeps alive), the graph-node samples (bounded,
// see graph_nodes.h) and one StepSample per step, thinned past kMaxStepSamples.
#include "memseal/leak_detector.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/bounded_samples.h"
#include "common/policy.h"
#include "common/text.h"
#include "detect/boundary_schedule.h"
#include "detect/device_findings.h"
#include "detect/device_summary.h"
#include "detect/evidence.h"
#include "detect/findings.h"
#include "detect/graph_nodes.h"
#include "detect/held_causes.h"
#include "detect/resident_memory.h"
#include "detect/retention_history.h"
#include "detect/step_phases.h"
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
constexpr std::size_t kMaxStepSamples = 16384;

// The sample of `step`, or of the nearest step before it that has one (samples are thinned).
const StepSample* sampleAtOrBefore(const std::vector<StepSample>& samples, std::uint32_t step) {
  auto after =
      std::upper_bound(samples.begin(), samples.end(), step,
                       [](std::uint32_t s, const StepSample& sample) { return s < sample.step; });
  return after == samples.begin() ? nullptr : &*(after - 1);
}

TrackerOptions detectorDefaults() {
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOn;
  defaults.observe_ops = OpWatching::automatic();
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
  detect::ResidentMemoryReader resident;
  detect::CostBoundedSchedule resident_schedule = detect::residentSchedule();
  // When a verdict is renewed past warm-up and its watched steps (a suspected leak's on every
  // boundary): each renewal costs a pass over the live table and the run's series, about as much
  // as 70 tracked allocations, so a healthy loop's is renewed on one boundary in 8 while its
  // memory moves, and as the cost allows while the boundaries since the last renewal look alike
  // (tracked bytes and tensors as they were then, resident memory no higher than its highest
  // then, no step's graph linked to an earlier one's, no graphs suspected then).
  detect::CostBoundedSchedule verdict_schedule = detect::verdictSchedule();
  StepSample at_last_renewal;
  std::int64_t resident_high = 0;  // the highest reading so far
  std::int64_t resident_high_at_last_renewal = 0;
  std::uint64_t linked_steps_at_last_renewal = 0;
  bool graphs_suspected_at_last_renewal = false;
  bool moved_since_renewal = true;
  // The most tracked bytes (CPU tensors and CUDA blocks) at a renewal since warm-up, -1 before one.
  std::int64_t tracked_high_since_warmup = -1;
  std::uint32_t current_step = 0;  // the step now running
  std::vector<StepSample> per_step;
  // The samples of the boundaries that read resident memory (detect/boundary_schedule.h); the
  // others carry the last reading in per_step.
  std::vector<StepSample> resident_readings;
  // The most samples each held (their pages touched; see ownRecordBytes).
  std::size_t per_step_most = 0;
  std::size_t resident_readings_most = 0;
  // What renewals read of those two, kept from one renewal to the next (detect/run_series.h).
  mutable detect::RunSeriesCache per_step_series;
  mutable detect::RunSeriesCache resident_series;
  std::uint64_t backward_at_warmup_end = 0;
  bool warmup_done = false;
  bool last_verdict = false;
  std::optional<std::uint32_t> leak_since;
  bool finished = false;
  std::vector<std::string> notes;
  // Phases of the steps, and build-ups of memory freed together (a phase's end, a reset).
  detect::StepPhases phases;
  std::uint64_t backward_at_step_start = 0;
  detect::RetentionHistory history;
  // The newest finding built that holds each group while it builds up, and the build-up's length
  // (judged steps) then: what a group held is told from it once it is freed.
  std::map<detect::GroupId, std::shared_ptr<const detect::BuiltFinding>> built;
  std::map<detect::GroupId, std::uint32_t> built_at_steps;
  bool findings_due = false;  // a refresh that had to wait (see refreshBuiltFindings)
  std::vector<detect::HeldCause> held;
  bool watch_every_step = false;    // ops of every step, since graphs built up and were freed
  bool every_step_watched = false;  // the options watch every step's ops

  State(DetectorOptions detector_options, const TrackerOptions& resolved)
      : options(std::move(detector_options)), tracker(resolved) {
    // Thinned in place (common::thinOlderHalf), they never reallocate: see ownRecordBytes.
    per_step.reserve(kMaxStepSamples + 1);
    resident_readings.reserve(kMaxStepSamples + 1);
  }

  // Resident memory into the boundary's sample: read when the schedule says so, else the last
  // reading carried over.
  void readResidentMemory(StepSample& sample, std::int64_t start_ns) {
    if (!resident_schedule.due(sample.step, start_ns, verdictForming())) {
      sample.resident_bytes = resident_readings.back().resident_bytes;
      return;
    }
    std::int64_t read = resident.read();  // 0: not readable here
    // In use: less the detector's own records and what malloc keeps free (a loop of ever-new
    // tensor sizes grows that for hundreds of thousands of steps, then levels off).
    std::int64_t not_in_use =
        ownRecordBytes() + (read > 0 ? resident.mallocFreeBytes(warmup_done) : 0);
    sample.resident_bytes = read > 0 ? std::max<std::int64_t>(0, read - not_in_use) : 0;
    resident_schedule.noteDone(sample.step, start_ns, detect::steadyNowNs());
    resident_high = std::max(resident_high, sample.resident_bytes);
    resident_readings.push_back(sample);
    resident_readings_most = std::max(resident_readings_most, resident_readings.size());
    common::thinOlderHalf(resident_readings, kMaxStepSamples);
  }

  // What the detector's own records of the steps hold in resident memory: they grow with every
  // step until they are first thinned (16,384 samples of 48 bytes), their pages touched as they
  // fill, and stay at that size after. Taken out of the resident set, or a healthy loop's resident
  // memory grows by these bytes, which over ~16,000 steps looked like a slow native leak of ~60
  // bytes a step.
  std::int64_t ownRecordBytes() const {
    return static_cast<std::int64_t>((per_step_most + resident_readings_most) * sizeof(StepSample));
  }

  // Warm-up and the steps after it, and a suspected leak: every boundary reads resident memory
  // and renews the verdict.
  bool verdictForming() const {
    return current_step <= options.warmup + kWatchedStepsAfterWarmup || last_verdict;
  }

  // Whether the boundary whose sample is `sample` (the step now running is current_step) renews
  // the verdict.
  bool renewalDue(const StepSample& sample, std::int64_t now_ns) {
    if (!moved_since_renewal) moved_since_renewal = movedSinceRenewal(sample);
    if (verdictForming()) return true;
    if (moved_since_renewal) return verdict_schedule.leastStridePassed(current_step);
    return verdict_schedule.due(current_step, now_ns, false);
  }

  // Whether the boundary whose sample is `sample` differs from the last renewal's. CUDA memory is
  // not in these totals (its blocks come through the allocator's events): a program whose CUDA
  // allocator reported any keeps renewing on one boundary in 8.
  bool movedSinceRenewal(const StepSample& sample) const {
    return graphs_suspected_at_last_renewal || track::deviceEventsSeen() ||
           sample.live_bytes != at_last_renewal.live_bytes ||
           sample.live_count != at_last_renewal.live_count ||
           resident_high > resident_high_at_last_renewal ||
           (nodes && nodes->linkedSteps() != linked_steps_at_last_renewal);
  }

  // Whether the renewal at the boundary of `sample` finds more tracked memory than every renewal
  // since warm-up did (the first one only sets the mark).
  bool newTrackedHigh(const StepSample& sample) {
    if (!warmup_done) return false;
    std::int64_t tracked = sample.live_bytes + detect::deviceAllocatedBytes();
    bool higher = tracked_high_since_warmup >= 0 && tracked > tracked_high_since_warmup;
    tracked_high_since_warmup = std::max(tracked_high_since_warmup, tracked);
    return higher;
  }

  void noteRenewal(const StepSample& sample, const detect::LeakEvidence& evidence,
                   std::int64_t start_ns) {
    verdict_schedule.noteDone(current_step, start_ns, detect::steadyNowNs());
    at_last_renewal = sample;
    resident_high_at_last_renewal = resident_high;
    linked_steps_at_last_renewal = nodes ? nodes->linkedSteps() : 0;
    graphs_suspected_at_last_renewal = evidence.graphs_suspected;
    moved_since_renewal = false;
  }

  bool backwardRan() const {
    return warmup_done && track::backwardFunctionsRun() > backward_at_warmup_end;
  }

  detect::LeakEvidence evidence(bool for_report = false) const {
    detect::EvidenceInputs inputs;
    inputs.warmup = options.warmup;
    inputs.current_step = current_step;
    inputs.per_step = &per_step;
    inputs.resident_readings = &resident_readings;
    inputs.per_step_series = &per_step_series;
    inputs.resident_series = &resident_series;
    inputs.nodes = nodes.get();
    inputs.backward_ran = backwardRan();
    inputs.watch_resident_memory = options.watch_resident_memory;
    inputs.keep_graph_roots = for_report;
    inputs.phases = &phases;
    inputs.history = &history;
    inputs.every_step_watched = every_step_watched;
    return detect::gatherEvidence(inputs);
  }

  // Findings for groups that build up, made while they are held: once when a build-up is first
  // judged growing, again each time it doubles (so a long build-up is told as it was at its
  // largest, at a cost of a few reports per build-up).
  // A finding names Python frames, which takes the GIL: on a thread that cannot take it now (an op
  // inside backward, which runs without it, while the caller of step() holds a lock the GIL's
  // holder may wait for) the refresh waits for the next step or report.
  void refreshBuiltFindings(const detect::LeakEvidence& evidence) {
    bool needed = findings_due;
    for (const detect::GroupAtBoundary& group : evidence.groups) {
      if (!group.grows) continue;
      auto at = built_at_steps.find(group.id);
      if (at == built_at_steps.end() || group.judged_steps >= 2 * at->second) needed = true;
    }
    if (!needed) return;
    findings_due = !track::pythonFramesReadableNow();
    if (findings_due) return;
    refreshBuiltFindingsNow();
  }

  void refreshBuiltFindingsNow() {
    findings_due = false;
    detect::LeakEvidence full = this->evidence(/*for_report=*/true);
    std::map<detect::GroupId, std::uint32_t> judged;
    for (const detect::GroupAtBoundary& group : full.groups) judged[group.id] = group.judged_steps;
    for (detect::BuiltFinding& finding : detect::buildFindingsWithGroups(full)) {
      auto shared = std::make_shared<const detect::BuiltFinding>(std::move(finding));
      for (const detect::GroupId& id : shared->groups) {
        built[id] = shared;
        built_at_steps[id] = judged[id];
      }
    }
  }

  // The resident memory that grew from before `first` to `last`: what graphs without tensor
  // storage cost while they built up.
  std::int64_t residentGrowth(std::uint32_t first, std::uint32_t last) const {
    const StepSample* before = first > 0 ? sampleAtOrBefore(resident_readings, first - 1) : nullptr;
    const StepSample* after = sampleAtOrBefore(resident_readings, last);
    if (before == nullptr || after == nullptr) return 0;
    return std::max<std::int64_t>(0, after->resident_bytes - before->resident_bytes);
  }

  // The build-ups that collapsed, as findings that say they were freed (one per built finding,
  // whatever number of its groups collapsed together).
  std::vector<HeldCause> heldCauses(const std::vector<detect::Collapse>& collapses) const {
    std::map<const detect::BuiltFinding*, std::vector<const detect::Collapse*>> by_finding;
    for (const detect::Collapse& collapse : collapses) {
      auto found = built.find(collapse.id);
      if (found != built.end()) by_finding[found->second.get()].push_back(&collapse);
    }
    std::vector<HeldCause> causes;
    for (const auto& [built_finding, parts] : by_finding) {
      // Freed only when all it holds was: a part still building up is told with the rest when
      // it goes (one build-up is not two).
      bool still_held = std::any_of(
          built_finding->groups.begin(), built_finding->groups.end(),
          [&](const detect::GroupId& id) {
            return history.buildingUp(id) &&
                   std::none_of(parts.begin(), parts.end(),
                                [&](const detect::Collapse* part) { return part->id == id; });
          });
      if (still_held) continue;
      HeldCause cause;
      cause.finding = built_finding->finding;
      HeldUntilFreed freed;
      freed.first_step = parts.front()->first_step;
      cause.detected_at = parts.front()->detected_at;
      std::uint32_t judged = 0;
      for (const detect::Collapse* part : parts) {
        freed.first_step = std::min(freed.first_step, part->first_step);
        freed.last_step = std::max(freed.last_step, part->last_step);
        freed.freed_at_step = std::max(freed.freed_at_step, part->freed_by - 1);
        freed.peak_bytes += part->peak_bytes;
        judged = std::max(judged, part->judged_steps);
        cause.detected_at = std::min(cause.detected_at, part->detected_at);
      }
      if (freed.peak_bytes == 0)
        freed.peak_bytes = residentGrowth(freed.first_step, freed.last_step);
      freed.found_after_steps =
          cause.detected_at >= freed.first_step ? cause.detected_at - freed.first_step + 1 : 0;
      freed.times = 1;
      freed.steps_per_time = freed.last_step - freed.first_step + 1;
      freed.phase = phases.name(phases.phaseOf(freed.last_step));
      cause.build_up_lengths[freed.last_step - freed.first_step + 1] = 1;
      cause.finding.freed = freed;
      // Its memory is gone: where it was says nothing about what holds memory now.
      for (LeakPart& part : cause.finding.parts) part.storage_addresses.clear();
      cause.key = causeKey(cause.finding);
      cause.by_collector = std::all_of(parts.begin(), parts.end(), [](const detect::Collapse* p) {
        return detect::freedByCollector(*p, track::collectedFrees(detect::collectorQuery(*p)));
      });
      for (const detect::Collapse* part : parts) {
        cause.freed_before = cause.freed_before || history.segmentStart(part->id) > 0;
      }
      causes.push_back(std::move(cause));
    }
    return causes;
  }

  void forgetGroupsNotBuildingUp() {
    for (auto it = built.begin(); it != built.end();) {
      if (history.buildingUp(it->first)) {
        ++it;
        continue;
      }
      built_at_steps.erase(it->first);
      it = built.erase(it);
    }
  }

  LeakReport buildReport() const {
    LeakReport report;
    report.steps = current_step;
    report.warmup = options.warmup;
    report.per_step = per_step;
    report.backward_ran = backwardRan();
    report.notes = notes;
    report.rank = rankFromEnvironment();  // a rank of a distributed job (torchrun's variables)
    detect::LeakEvidence evidence = this->evidence(/*for_report=*/true);
    report.findings = detect::buildFindings(evidence);
    // Build-ups freed since the last boundary (a report at exit, after the program freed what its
    // loop held). One that began in the first run of its phase and was never freed before was held
    // all along: a finding as at the last boundary. One of a phase begun again, or after an
    // earlier build-up was freed (a reset), was a phase's and ended with it, as those freed at a
    // boundary did.
    std::vector<HeldCause> all_held = held;
    for (HeldCause& cause : heldCauses(history.collapsedSince(evidence.groups, current_step))) {
      bool known = std::any_of(report.findings.begin(), report.findings.end(),
                               [&](const LeakFinding& f) { return causeKey(f) == cause.key; });
      if (known) continue;
      if (!phases.inFirstRunOfItsPhase(cause.finding.freed->first_step) || cause.freed_before ||
          cause.by_collector) {
        addHeldCause(all_held, std::move(cause));
        continue;
      }
      cause.finding.freed.reset();
      // The same site, read without its Python line after Python finalised: what is left of the
      // build-up, which the cause as recorded while it was held describes whole.
      report.findings.erase(
          std::remove_if(report.findings.begin(), report.findings.end(),
                         [&](const LeakFinding& f) { return sameCause(f, cause); }),
          report.findings.end());
      report.findings.push_back(std::move(cause.finding));
    }
    std::optional<std::uint32_t> held_detected;
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
        report.notes.push_back(detect::collectedNote(cause, again));
        continue;
      }
      if (cause.finding.category == LeakCategory::kTensorsRetained) {
        report.notes.push_back(detect::heldTensorsNote(cause.finding));
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
    std::int64_t held_free = resident.heldFreeGrowth();
    bool leak_cost = detect::chargeHeldFreeToKeptGraphs(
        held_free >= detect::ResidentMemoryReader::kHeldFreeNoteBytes ? held_free : 0,
        current_step - std::min(current_step, options.warmup), report.findings);
    if (std::string note = resident.heldFreeNote(leak_cost); !note.empty()) {
      report.notes.push_back(note);
    }
    detect::orderFindings(report.findings);
    detect::mergeFindingsOfOneCause(report.findings);
    detect::addDeviceFindings(options.warmup, report);
    report.devices = detect::summarizeDevices(options.warmup);
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
        report.notes.push_back("the program changed phase more than " +
                               std::to_string(detect::StepPhases::kMaxRuns) +
                               " times: later steps were judged with the phase they began in");
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
  std::string graph_note;
  if (options.watch_graph_nodes &&
      (resolved.observe_ops->mode == OpWatching::Mode::kOff || !*resolved.record_tensor_metadata)) {
    // Graph nodes are seen on op outputs.
    options.watch_graph_nodes = false;
    graph_note = std::string("autograd graph nodes were not watched (") +
                 (resolved.observe_ops->mode == OpWatching::Mode::kOff ? "ops not watched"
                                                                       : "tensor metadata off") +
                 "): a graph kept alive without tensor storage (`total_loss += loss`) is not seen";
  }
  std::uint32_t warmup = options.warmup;
  state_ = std::make_unique<State>(std::move(options), resolved);
  state_->every_step_watched = resolved.observe_ops->mode == OpWatching::Mode::kEveryStep;
  if (!graph_note.empty()) state_->notes.push_back(graph_note);
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
  state.readResidentMemory(sample, boundary_ns);
  ++state.current_step;
  if (!state.warmup_done && state.current_step >= state.options.warmup) {
    state.warmup_done = true;
    state.backward_at_warmup_end = track::backwardFunctionsRun();
  }
  setStep(state.current_step);
  // Counted where the verdict is renewed; carried over on the boundaries in between.
  if (!state.per_step.empty()) sample.graph_nodes_alive = state.per_step.back().graph_nodes_alive;
  state.per_step.push_back(sample);
  state.per_step_most = std::max(state.per_step_most, state.per_step.size());
  common::thinOlderHalf(state.per_step, kMaxStepSamples);
  if (!state.renewalDue(sample, boundary_ns)) return;
  std::int64_t renewal_start_ns = detect::steadyNowNs();
  detect::LeakEvidence evidence = state.evidence();
  state.per_step.back().graph_nodes_alive = evidence.graph_samples_alive;
  std::vector<detect::Collapse> collapses =
      state.history.update(evidence.groups, state.current_step);
  for (const detect::Collapse& collapse : collapses) {
    // Graphs built up and freed: the next build-up is seen step by step only if every step's ops
    // are watched (graph nodes are seen on watched steps).
    if (collapse.id.graph) state.watch_every_step = true;
  }
  for (HeldCause& cause : state.heldCauses(collapses)) addHeldCause(state.held, std::move(cause));
  state.forgetGroupsNotBuildingUp();
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
  state.noteRenewal(sample, evidence, renewal_start_ns);
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
