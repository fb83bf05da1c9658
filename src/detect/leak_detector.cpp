// The leak detector: at every step boundary it groups the surviving allocations of earlier steps by
// site and tensor signature, samples autograd nodes made in each step to see which outlive it, and
// reads the resident set; then applies growth_criterion. Memory it keeps: the live table (bounded
// by what the program itself keeps alive), a fixed ring of node samples per step for a bounded
// number of steps, and one StepSample per step.
#include "memseal/leak_detector.h"

#include <ATen/core/TensorBase.h>
#include <torch/csrc/autograd/function.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "analyze/live_view.h"
#include "detect/diagnosis.h"
#include "detect/growth_criterion.h"
#include "track/engine.h"

namespace memseal {

namespace {

constexpr int kNodeSamplesPerStep = 16;
constexpr std::size_t kMaxNodeSampleSteps = 512;
// Resident growth below this is noise from malloc arenas and page-granular accounting.
constexpr double kMinUntrackedBytesPerStep = 64 * 1024;
// Resident growth is judged on the most recent steps only, so each step() costs the same.
constexpr std::size_t kResidentWindow = 256;

// AddressSanitizer keeps freed memory in quarantine, so resident memory grows every step of any
// loop: there, resident growth says nothing about leaks and is not used.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kResidentMemoryMeaningful = false;
#else
constexpr bool kResidentMemoryMeaningful = true;
#endif

std::int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages_total = 0;
  std::int64_t pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

struct NodeSample {
  std::weak_ptr<torch::autograd::Node> node;
  std::uint32_t site = 0;
  track::TensorSignature signature;
};

struct StepNodeSamples {
  std::uint32_t step = 0;
  // The newest samples of the step, in creation order (a ring: `next` is the oldest once full).
  NodeSample samples[kNodeSamplesPerStep];
  int count = 0;
  int next = 0;
  const torch::autograd::Node* last_node = nullptr;
};

// Groups survivors by site and tensor signature, as the issue asks.
using GroupKey = std::tuple<std::uint32_t, std::int8_t, std::int8_t, std::vector<std::int64_t>>;

GroupKey groupKeyOf(const track::LiveRecord& record) {
  std::vector<std::int64_t> shape;
  for (int i = 0; i < record.signature.dims && i < track::kMaxCachedDims; ++i) {
    shape.push_back(record.signature.sizes[i]);
  }
  return {record.site, record.signature.dims, record.signature.scalar_type, std::move(shape)};
}

struct StorageGroup {
  std::vector<std::uint32_t> steps;  // distinct, sorted
  std::int64_t count = 0;
  std::int64_t bytes = 0;
  // Index into the collected items: the newest survivor whose tensor is still referenced (its
  // metadata is read live: requires_grad set after the op, as modules do, shows), else the newest.
  std::size_t example = 0;
  std::int64_t example_time = -1;
  bool example_has_tensor = false;
};

struct NodeGroup {
  std::vector<std::uint32_t> steps;
  std::int64_t count = 0;
  track::TensorSignature signature;
};

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
  }
  return "unknown";
}

LeakError::LeakError(LeakReport report)
    : std::runtime_error("memseal found a memory leak:\n" + report.toText()),
      report_(std::move(report)) {}

struct LeakDetector::State : track::GradFnObserver {
  DetectorOptions options;
  Tracker tracker;
  std::uint32_t current_step = 0;  // the step now running
  std::vector<StepSample> per_step;
  std::uint64_t backward_at_warmup_end = 0;
  bool warmup_done = false;
  bool last_verdict = false;
  std::optional<std::uint32_t> leak_since;
  bool finished = false;

  mutable std::mutex nodes_mutex;
  std::deque<StepNodeSamples> node_steps;

  explicit State(DetectorOptions detector_options)
      : options(std::move(detector_options)), tracker(options.tracker) {}

  void onGradFn(const at::TensorBase& output, const std::shared_ptr<torch::autograd::Node>& node,
                std::uint32_t site) override {
    std::uint32_t step = track::Engine::instance().step.load(std::memory_order_relaxed);
    if (step < options.warmup) return;
    std::lock_guard<std::mutex> lock(nodes_mutex);
    if (node_steps.empty() || node_steps.back().step != step) {
      node_steps.emplace_back();
      node_steps.back().step = step;
      thinNodeSteps();
    }
    StepNodeSamples& samples = node_steps.back();
    if (samples.last_node == node.get()) return;  // an op returning its input's node again
    samples.last_node = node.get();
    NodeSample& slot = samples.samples[samples.next];
    slot.node = node;
    slot.site = site;
    slot.signature = track::Engine::instance().signatureOf(output);
    samples.next = (samples.next + 1) % kNodeSamplesPerStep;
    if (samples.count < kNodeSamplesPerStep) ++samples.count;
  }

  // Bounded memory: past kMaxNodeSampleSteps steps, drop every other step of the older half.
  void thinNodeSteps() {
    if (node_steps.size() <= kMaxNodeSampleSteps) return;
    std::deque<StepNodeSamples> kept;
    std::size_t half = node_steps.size() / 2;
    for (std::size_t i = 0; i < node_steps.size(); ++i) {
      if (i >= half || i % 2 == 0) kept.push_back(std::move(node_steps[i]));
    }
    node_steps.swap(kept);
  }

  // Per root site: the steps whose newest surviving node was made there. The newest alive node of
  // a step is what keeps the rest of that step's graph alive (everything older hangs off it).
  std::map<std::uint32_t, NodeGroup> nodeGroups(std::int64_t* alive_total) const {
    std::map<std::uint32_t, NodeGroup> groups;
    std::int64_t alive = 0;
    std::lock_guard<std::mutex> lock(nodes_mutex);
    for (const StepNodeSamples& samples : node_steps) {
      if (samples.step >= current_step) continue;  // the running step's nodes may still be in use
      const NodeSample* root = nullptr;
      for (int i = 0; i < samples.count; ++i) {
        // Walk from oldest to newest so `root` ends at the newest alive sample.
        int index = (samples.next - samples.count + i + kNodeSamplesPerStep) % kNodeSamplesPerStep;
        const NodeSample& sample = samples.samples[index];
        if (!sample.node.expired()) {
          root = &sample;
          ++alive;
        }
      }
      if (root == nullptr) continue;
      NodeGroup& group = groups[root->site];
      group.steps.push_back(samples.step);
      group.count += 1;
      group.signature = root->signature;
    }
    if (alive_total != nullptr) *alive_total = alive;
    return groups;
  }

  struct Analysis {
    std::vector<analyze::LiveItem> items;
    std::map<GroupKey, StorageGroup> leaking_storage;
    std::map<std::uint32_t, NodeGroup> leaking_nodes;
    double untracked_bytes_per_step = 0;
    bool leak() const {
      return !leaking_storage.empty() || !leaking_nodes.empty() || untracked_bytes_per_step > 0;
    }
  };

  // The steps in [first, last] whose node samples are kept, sorted.
  std::vector<std::uint32_t> keptNodeSteps(std::uint32_t first, std::uint32_t last) const {
    std::vector<std::uint32_t> kept;
    std::lock_guard<std::mutex> lock(nodes_mutex);
    for (const StepNodeSamples& samples : node_steps) {
      if (samples.step >= first && samples.step <= last && samples.step < current_step) {
        kept.push_back(samples.step);
      }
    }
    return kept;
  }

  // The steps after warm-up completed so far, as a [first, last] range; false when none.
  bool observedRange(std::uint32_t* first, std::uint32_t* last) const {
    if (current_step <= options.warmup) return false;
    *first = options.warmup;
    *last = current_step - 1;
    return true;
  }

  Analysis analyze(bool keep_items) const {
    Analysis analysis;
    std::uint32_t first = 0;
    std::uint32_t last = 0;
    if (!observedRange(&first, &last)) return analysis;
    std::uint32_t session = track::Engine::instance().session();
    // Group without taking tensor references: only flagged groups need their tensors read.
    std::map<GroupKey, StorageGroup> groups;
    track::Engine::instance().live().forEach([&](const track::LiveRecord& record) {
      if (record.session != session || record.step < first || record.step > last) return;
      StorageGroup& group = groups[groupKeyOf(record)];
      if (group.steps.empty() || group.steps.back() != record.step) {
        auto position = std::lower_bound(group.steps.begin(), group.steps.end(), record.step);
        if (position == group.steps.end() || *position != record.step) {
          group.steps.insert(position, record.step);
        }
      }
      group.count += 1;
      group.bytes += static_cast<std::int64_t>(record.bytes);
    });
    std::set<std::uint32_t> leaking_sites;
    for (auto& [key, group] : groups) {
      if (detect::survivorsKeepGrowing(group.steps, first, last)) {
        analysis.leaking_storage.emplace(key, std::move(group));
        leaking_sites.insert(std::get<0>(key));
      }
    }
    if (keep_items && !analysis.leaking_storage.empty()) {
      analysis.items = analyze::collectLive([&](const track::LiveRecord& record) {
        return record.step >= first && record.step <= last && leaking_sites.count(record.site) != 0;
      });
      for (std::size_t i = 0; i < analysis.items.size(); ++i) {
        auto found = analysis.leaking_storage.find(groupKeyOf(analysis.items[i].record));
        if (found == analysis.leaking_storage.end()) continue;
        StorageGroup& group = found->second;
        // With ops watched on one step in N, the steps in between hold no tensor reference.
        bool has_tensor = analysis.items[i].tensor.defined();
        std::int64_t time = analysis.items[i].record.time_ns;
        if (std::make_pair(has_tensor, time) >
            std::make_pair(group.example_has_tensor, group.example_time)) {
          group.example_time = time;
          group.example = i;
          group.example_has_tensor = has_tensor;
        }
      }
    }
    if (options.watch_graph_nodes) {
      // Judged against the steps whose samples are kept (thinned on long runs), by position.
      std::vector<std::uint32_t> kept = keptNodeSteps(first, last);
      for (auto& [site, group] : nodeGroups(nullptr)) {
        std::vector<std::uint32_t> positions;
        for (std::uint32_t step : group.steps) {
          auto found = std::lower_bound(kept.begin(), kept.end(), step);
          if (found != kept.end() && *found == step) {
            positions.push_back(static_cast<std::uint32_t>(found - kept.begin()));
          }
        }
        if (!kept.empty() && detect::survivorsKeepGrowing(
                                 positions, 0, static_cast<std::uint32_t>(kept.size() - 1))) {
          analysis.leaking_nodes.emplace(site, std::move(group));
        }
      }
    }
    if (options.watch_resident_memory && kResidentMemoryMeaningful &&
        analysis.leaking_nodes.empty()) {
      std::vector<std::int64_t> resident;
      std::vector<std::int64_t> live;
      std::size_t start = per_step.size() > kResidentWindow ? per_step.size() - kResidentWindow : 0;
      for (std::size_t i = start; i < per_step.size(); ++i) {
        const StepSample& sample = per_step[i];
        if (sample.step < first) continue;
        resident.push_back(sample.resident_bytes);
        live.push_back(sample.live_bytes);
      }
      double growth = detect::steadyGrowthPerStep(resident, kMinUntrackedBytesPerStep);
      // Only growth that tensor memory does not explain.
      if (growth > 0 && detect::slopePerStep(live) < growth / 4) {
        analysis.untracked_bytes_per_step = growth;
      }
    }
    return analysis;
  }

  bool backwardRan() const {
    return warmup_done &&
           track::Engine::instance().backward_functions.load() > backward_at_warmup_end;
  }

  double residentSlope() const {
    std::vector<std::int64_t> resident;
    for (const StepSample& sample : per_step) {
      if (sample.step >= options.warmup) resident.push_back(sample.resident_bytes);
    }
    return std::max(0.0, detect::slopePerStep(resident));
  }

  LeakReport buildReport() const {
    LeakReport report;
    report.steps = current_step;
    report.warmup = options.warmup;
    report.per_step = per_step;
    report.backward_ran = backwardRan();
    Analysis analysis = analyze(true);
    std::uint32_t first = 0;
    std::uint32_t last = 0;
    std::uint32_t observed = observedRange(&first, &last) ? last - first + 1 : 1;
    std::set<LeakCategory> storage_categories;
    for (const auto& [key, group] : analysis.leaking_storage) {
      LeakFinding finding;
      finding.retained = "tensor storage";
      finding.survivors = group.count;
      finding.survivor_bytes = group.bytes;
      finding.steps_with_survivors = static_cast<std::uint32_t>(group.steps.size());
      finding.bytes_per_step = static_cast<double>(group.bytes) / observed;
      finding.count_per_step = static_cast<double>(group.count) / observed;
      finding.site = analyze::describeSite(std::get<0>(key));
      if (group.example_time >= 0)
        finding.tensor = analyze::describeTensor(analysis.items[group.example]);
      finding.category = detect::categorize(finding.tensor, report.backward_ran);
      finding.hint = detect::hintFor(finding);
      storage_categories.insert(finding.category);
      report.findings.push_back(std::move(finding));
    }
    double resident_slope = residentSlope();
    for (const auto& [site, group] : analysis.leaking_nodes) {
      LeakFinding finding;
      finding.retained = "autograd graph nodes";
      finding.category = report.backward_ran ? LeakCategory::kAutogradGraphRetained
                                             : LeakCategory::kGradEnabledInference;
      // A storage finding of the same cause already points at the retained tensors.
      if (storage_categories.count(finding.category) != 0) continue;
      finding.survivors = group.count;
      finding.steps_with_survivors = static_cast<std::uint32_t>(group.steps.size());
      finding.count_per_step = static_cast<double>(group.count) / observed;
      finding.bytes_per_step = resident_slope;
      finding.site = analyze::describeSite(site);
      analyze::LiveItem item;
      item.record.signature = group.signature;
      finding.tensor = analyze::describeTensor(item);
      finding.hint = detect::hintFor(finding);
      report.findings.push_back(std::move(finding));
    }
    if (analysis.untracked_bytes_per_step > 0) {
      LeakFinding finding;
      finding.category = LeakCategory::kUntrackedGrowth;
      finding.retained = "resident memory";
      finding.bytes_per_step = analysis.untracked_bytes_per_step;
      finding.steps_with_survivors = observed;
      finding.site.op = "<outside tensor storage>";
      finding.hint = detect::hintFor(finding);
      report.findings.push_back(std::move(finding));
    }
    bool graph_retained = storage_categories.count(LeakCategory::kAutogradGraphRetained) != 0 ||
                          storage_categories.count(LeakCategory::kGradEnabledInference) != 0;
    for (LeakFinding& finding : report.findings) {
      if (graph_retained && finding.category == LeakCategory::kTensorsRetained) {
        finding.hint +=
            " It may also be an input saved by the autograd graph retained above "
            "(a graph keeps the inputs its backward needs): fix that finding first.";
      }
    }
    // Largest first; resident growth last, as the weakest evidence (it names no site).
    std::stable_sort(report.findings.begin(), report.findings.end(),
                     [](const LeakFinding& a, const LeakFinding& b) {
                       bool a_untracked = a.category == LeakCategory::kUntrackedGrowth;
                       bool b_untracked = b.category == LeakCategory::kUntrackedGrowth;
                       if (a_untracked != b_untracked) return b_untracked;
                       return a.bytes_per_step > b.bytes_per_step;
                     });
    report.leak = !report.findings.empty();
    if (report.leak) report.detected_at_step = leak_since;
    return report;
  }
};

LeakDetector::LeakDetector(DetectorOptions options) {
  if (options.on_leak == LeakPolicy::kCallback && !options.on_leak_callback) {
    throw std::invalid_argument("memseal: LeakPolicy::kCallback needs on_leak_callback");
  }
  if (options.watch_graph_nodes &&
      (!options.tracker.observe_ops || !options.tracker.record_tensor_metadata)) {
    throw std::invalid_argument(
        "memseal: watch_graph_nodes needs TrackerOptions::observe_ops and record_tensor_metadata "
        "(graph nodes are seen on op outputs); turn them on or set watch_graph_nodes = false");
  }
  state_ = std::make_unique<State>(std::move(options));
  state_->tracker.start();
  setStep(0);
  if (state_->options.watch_graph_nodes) track::Engine::instance().setGradFnObserver(state_.get());
}

LeakDetector::~LeakDetector() {
  if (!state_->finished) {
    track::Engine::instance().setGradFnObserver(nullptr);
    state_->tracker.stop();
  }
}

void LeakDetector::step() {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::step() after finish()");
  StepSample sample;
  sample.step = state.current_step;
  DeviceStats stats = state.tracker.stats();
  sample.live_bytes = stats.live_bytes;
  sample.live_count = stats.live_count;
  sample.resident_bytes = residentBytes();
  ++state.current_step;
  if (state.options.watch_graph_nodes) state.nodeGroups(&sample.graph_nodes_alive);
  state.per_step.push_back(sample);
  if (!state.warmup_done && state.current_step >= state.options.warmup) {
    state.warmup_done = true;
    state.backward_at_warmup_end = track::Engine::instance().backward_functions.load();
  }
  setStep(state.current_step);
  bool verdict = state.analyze(false).leak();
  if (verdict && !state.last_verdict) state.leak_since = sample.step;
  if (!verdict) state.leak_since.reset();
  state.last_verdict = verdict;
}

LeakReport LeakDetector::report() const { return state_->buildReport(); }

LeakReport LeakDetector::finish() {
  State& state = *state_;
  if (state.finished) throw std::logic_error("memseal: LeakDetector::finish() called twice");
  LeakReport report = state.buildReport();
  track::Engine::instance().setGradFnObserver(nullptr);
  state.tracker.stop();
  state.finished = true;
  if (!report.leak) return report;
  switch (state.options.on_leak) {
    case LeakPolicy::kWarn:
      std::cerr << report.toText();
      break;
    case LeakPolicy::kThrow:
      throw LeakError(report);
    case LeakPolicy::kCallback:
      state.options.on_leak_callback(report);
      break;
    case LeakPolicy::kNone:
      break;
  }
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
