#include "inject/fork_child_watch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "detect/growth_criterion.h"
#include "inject/step_tuning.h"
#include "track/memory_counters.h"

namespace memseal::inject {

namespace {

// Private memory growing slower than this per window is noise (allocator arenas, stacks).
constexpr double kMinPrivateGrowthPerWindow = 256.0 * 1024;

// Whether tensor memory grew by more than it moves between two windows: a worker samples its
// tensors in flight (a batch being collated), and a few dozen such samples can rise by chance.
bool grewBeyondItsChurn(const std::vector<std::int64_t>& samples, double growth_per_window) {
  std::int64_t largest_fall = 0;
  for (std::size_t i = 1; i < samples.size(); ++i) {
    largest_fall = std::max(largest_fall, samples[i - 1] - samples[i]);
  }
  double growth = growth_per_window * static_cast<double>(samples.size() - 1);
  return growth > 2.0 * static_cast<double>(largest_fall);
}

}  // namespace

std::int64_t privateMemoryBytes() {
  std::FILE* file = std::fopen("/proc/self/smaps_rollup", "re");
  if (file == nullptr) return 0;
  char line[256];
  long long total_kib = 0;
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "Private_Clean: %lld kB", &kib) == 1 ||
        std::sscanf(line, "Private_Dirty: %lld kB", &kib) == 1) {
      total_kib += kib;
    }
  }
  std::fclose(file);
  return total_kib * 1024;
}

LeakReport forkChildReport(pid_t parent, const std::vector<std::int64_t>& tensor_bytes,
                           const std::vector<std::int64_t>& private_bytes) {
  LeakReport report;
  std::size_t windows = std::min(tensor_bytes.size(), private_bytes.size());
  report.steps = static_cast<std::uint32_t>(windows);
  report.warmup = 0;
  std::vector<std::uint32_t> steps;
  for (std::size_t i = 0; i < windows; ++i) {
    StepSample sample;
    sample.step = static_cast<std::uint32_t>(i);
    sample.live_bytes = tensor_bytes[i];
    sample.resident_bytes = private_bytes[i];
    report.per_step.push_back(sample);
    steps.push_back(sample.step);
  }
  report.origin.forked_from_pid = parent;
  std::vector<std::int64_t> tensor_samples(tensor_bytes.begin(), tensor_bytes.begin() + windows);
  double tensor_growth = detect::steadyTensorGrowthPerStep(steps, tensor_samples);
  if (tensor_growth > 0 && !grewBeyondItsChurn(tensor_samples, tensor_growth)) tensor_growth = 0;
  double private_growth = detect::steadyGrowthPerStep(
      std::vector<std::int64_t>(private_bytes.begin(), private_bytes.begin() + windows),
      kMinPrivateGrowthPerWindow);
  if (tensor_growth > 0) {
    LeakFinding finding;
    finding.category = LeakCategory::kTensorsRetained;
    finding.retained = "tensor storage";
    finding.bytes_per_step = tensor_growth;
    finding.steps_observed = report.steps;
    finding.site.op = "<not attributed in a forked child>";
    finding.hint =
        "Tracked tensor memory of this forked child grows every window. Run the child's work "
        "under `memseal check` or in an exec'd process (multiprocessing's 'spawn' start method) "
        "for the site, tensors and cause.";
    report.findings.push_back(finding);
  }
  if (private_growth > 0 && private_growth > 4 * std::max(tensor_growth, 0.0)) {
    LeakFinding finding;
    finding.category = LeakCategory::kUntrackedGrowth;
    finding.retained = "private memory";
    finding.bytes_per_step = private_growth;
    finding.explained_bytes_per_step = std::max(tensor_growth, 0.0);
    finding.steps_observed = report.steps;
    finding.hint =
        "Private memory of this forked child grows while its tensor memory does not: it is "
        "writing pages it shares with its parent (copy-on-write). Python writes an object on "
        "every read (its reference count), so a worker that reads a dataset held as Python "
        "lists, dicts or strings copies the parent's dataset page by page, in every worker. Keep "
        "the dataset in a few large objects (numpy arrays or tensors, strings packed into one "
        "array), or load it inside each worker (DataLoader worker_init_fn).";
    report.findings.push_back(finding);
  }
  std::sort(report.findings.begin(), report.findings.end(),
            [](const LeakFinding& a, const LeakFinding& b) {
              return a.bytes_per_step > b.bytes_per_step;
            });
  report.leak = !report.findings.empty();
  return report;
}

ForkChildWatch::ForkChildWatch(pid_t parent)
    : parent_(parent), next_window_(Clock::now() + kShortestWindow) {}

std::chrono::nanoseconds ForkChildWatch::untilNextWindow() const {
  return std::max<std::chrono::nanoseconds>(next_window_ - Clock::now(),
                                            std::chrono::nanoseconds(0));
}

void ForkChildWatch::window() {
  tensor_bytes_.push_back(track::cpuCounters().read("cpu").live_bytes);
  private_bytes_.push_back(privateMemoryBytes());
  Clock::time_point now = Clock::now();
  next_window_ = now + runSizedWindow(now - started_);
}

LeakReport ForkChildWatch::report() const {
  return forkChildReport(parent_, tensor_bytes_, private_bytes_);
}

}  // namespace memseal::inject
