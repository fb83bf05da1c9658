// The leak detector's public face: it numbers steps, samples totals at every step boundary, and
// asks detect/evidence for a verdict; the report puts the evidence into findings. Memory it keeps:
// the live table (bounded by what the program itself keeps alive), the graph-node samples (bounded,
// see graph_nodes.h) and one StepSample per step, thinned past kMaxStepSamples.
#include "memseal/leak_detector.h"

#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "detect/device_findings.h"
#include "detect/device_summary.h"
#include "detect/evidence.h"
#include "detect/findings.h"
#include "detect/graph_nodes.h"
#include "detect/resident_memory.h"
#include "report/policy.h"
#include "track/grad_fn_observer.h"
#include "track/session.h"

namespace memseal {

namespace {

// With ops watched automatically, every step is watched this long after warm-up, so a verdict
// (which needs 4 of them) is clear within 10 steps; then the loop's repetition is trusted.
constexpr std::uint32_t kWatchedStepsAfterWarmup = 10;
constexpr std::size_t kMaxStepSamples = 16384;
// Past warm-up and its watched steps, a healthy loop's verdict is renewed on one step boundary in
// this many (a suspected leak's on every one): each renewal costs a pass over the live table.
constexpr std::uint32_t kVerdictEvery = 4;

// Bounded memory: past kMaxStepSamples, every other sample of the older half goes. Each sample
// keeps its step number, so rates stay right.
void thinStepSamples(std::vector<StepSample>& samples) {
  if (samples.size() <= kMaxStepSamples) return;
  std::vector<StepSample> kept;
  std::size_t half = samples.size() / 2;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i >= half || i % 2 == 0) kept.push_back(samples[i]);
  }
  samples.swap(kept);
}

TrackerOptions detectorDefaults() {
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOn;
  defaults.observe_ops = OpWatching::automatic();
  return defaults;
}

}  // namespace

const char* categoryId(LeakCategory category) {
  switch (category) {
    case LeakCategory::kAutogradGraphRetained:
      return "autograd-graph-retained";
    case LeakCategory::kGradEnabledInference:
      return "grad-enabled-inference";
    case LeakCategory::kParametersCreatedPerStep:
      return "parameters-created-per-step";
    case LeakCategory::kTensorsRetained:
      return "tensors-retained";
    case LeakCategory::kUntrackedGrowth:
      return "untracked-growth";
    case LeakCategory::kCreateGraphCycle:
      return "create-graph-cycle";
  }
  return "unknown";
}

LeakError::LeakError(LeakReport report)
    : std::runtime_error("memseal found a memory leak:\n" + report.toText()),
      report_(std::move(report)) {}

struct LeakDetector::State {
  DetectorOptions options;
  Tracker tracker;
  std::unique_ptr<detect::GraphNodeSampler> nodes;
  detect::ResidentMemoryReader resident;
  std::uint32_t current_step = 0;  // the step now running
  std::vector<StepSample> per_step;
  std::uint64_t backward_at_warmup_end = 0;
  bool warmup_done = false;
  bool last_verdict = false;
  std::optional<std::uint32_t> leak_since;
  bool finished = false;
  std::vector<std::string> notes;

  State(DetectorOptions detector_options, const TrackerOptions& resolved)
      : options(std::move(detector_options)), tracker(resolved) {}

  bool backwardRan() const {
    return warmup_done && track::backwardFunctionsRun() > backward_at_warmup_end;
  }

  detect::LeakEvidence evidence(bool for_report = false) const {
    detect::EvidenceInputs inputs;
    inputs.warmup = options.warmup;
    inputs.current_step = current_step;
    inputs.per_step = &per_step;
    inputs.nodes = nodes.get();
    inputs.backward_ran = backwardRan();
    inputs.watch_resident_memory = options.watch_resident_memory;
    inputs.keep_graph_roots = for_report;
    return detect::gatherEvidence(inputs);
  }

  LeakReport buildReport() const {
    LeakReport report;
    report.steps = current_step;
    report.warmup = options.warmup;
    report.per_step = per_step;
    report.backward_ran = backwardRan();
    report.notes = notes;
    report.findings = detect::buildFindings(evidence(/*for_report=*/true));
    detect::addDeviceFindings(options.warmup, report);
    report.devices = detect::summarizeDevices(options.warmup);
    report.leak = !report.findings.empty();
    if (report.leak) report.detected_at_step = leak_since;
    return report;
  }

  void stopWatching() {
    if (nodes) track::setGradFnObserver(nullptr);
    tracker.stop();
  }
};

LeakDetector::LeakDetector(DetectorOptions options) {
  if (options.on_leak == LeakPolicy::kCallback && !options.on_leak_callback) {
    throw std::invalid_argument("memseal: LeakPolicy::kCallback needs on_leak_callback");
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
  if (!graph_note.empty()) state_->notes.push_back(graph_note);
  setStep(0);
  state_->tracker.start();
  track::watchEveryStepUntil(warmup + kWatchedStepsAfterWarmup);
  if (state_->options.watch_graph_nodes) {
    state_->nodes = std::make_unique<detect::GraphNodeSampler>(warmup);
    track::setGradFnObserver(state_->nodes.get());
  }
}

LeakDetector::~LeakDetector() {
  if (!state_->finished) state_->stopWatching();
}

void LeakDetector::step() {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::step() after finish()");
  StepSample sample;
  sample.step = state.current_step;
  DeviceStats stats = state.tracker.stats();
  sample.live_bytes = stats.live_bytes;
  sample.live_count = stats.live_count;
  sample.resident_bytes = state.resident.read();
  ++state.current_step;
  if (!state.warmup_done && state.current_step >= state.options.warmup) {
    state.warmup_done = true;
    state.backward_at_warmup_end = track::backwardFunctionsRun();
  }
  setStep(state.current_step);
  // Counted where the verdict is renewed; carried over on the boundaries in between.
  if (!state.per_step.empty()) sample.graph_nodes_alive = state.per_step.back().graph_nodes_alive;
  state.per_step.push_back(sample);
  thinStepSamples(state.per_step);
  bool renew = state.current_step <= state.options.warmup + kWatchedStepsAfterWarmup ||
               state.last_verdict || state.current_step % kVerdictEvery == 0;
  if (!renew) return;
  detect::LeakEvidence evidence = state.evidence();
  state.per_step.back().graph_nodes_alive = evidence.graph_samples_alive;
  bool verdict = evidence.leak();
  if (verdict && !state.last_verdict) state.leak_since = sample.step;
  if (!verdict) state.leak_since.reset();
  state.last_verdict = verdict;
}

LeakReport LeakDetector::report() const { return state_->buildReport(); }

LeakReport LeakDetector::finish() {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::finish() called twice");
  LeakReport report = state.buildReport();
  state.stopWatching();
  state.finished = true;
  if (!report.leak) return report;
  report::PolicyAction action = report::PolicyAction::kNone;
  switch (state.options.on_leak) {
    case LeakPolicy::kWarn:
      action = report::PolicyAction::kPrint;
      break;
    case LeakPolicy::kThrow:
      action = report::PolicyAction::kThrow;
      break;
    case LeakPolicy::kCallback:
      action = report::PolicyAction::kCallback;
      break;
    case LeakPolicy::kNone:
      break;
  }
  report::applyPolicy<LeakError>(action, report, state.options.on_leak_callback);
  return report;
}

LeakReport check(const std::function<void(int)>& step_fn, DetectorOptions options) {
  if (options.steps <= options.warmup + 3) {
    throw std::invalid_argument("memseal: check() needs more than warmup + 3 steps (warmup " +
                                std::to_string(options.warmup) + ", steps " +
                                std::to_string(options.steps) + ") to tell growth from noise");
  }
  std::uint32_t steps = options.steps;
  LeakDetector detector(std::move(options));
  for (std::uint32_t i = 0; i < steps; ++i) {
    step_fn(static_cast<int>(i));
    detector.step();
  }
  return detector.finish();
}

}  // namespace memseal
