#include "detect/forked_child_verdict.h"

#include <algorithm>
#include <string>

#include "detect/diagnosis.h"
#include "detect/growth_criterion.h"

namespace memseal::detect {

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

LeakReport forkedChildReport(std::int64_t parent, const std::vector<std::int64_t>& tensor_bytes,
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
  double tensor_growth = steadyTensorGrowthPerStep(steps, tensor_samples);
  if (tensor_growth > 0 && !grewBeyondItsChurn(tensor_samples, tensor_growth)) tensor_growth = 0;
  double private_growth = steadyGrowthPerStep(
      std::vector<std::int64_t>(private_bytes.begin(), private_bytes.begin() + windows),
      kMinPrivateGrowthPerWindow);
  if (tensor_growth > 0) {
    LeakFinding finding;
    finding.category = LeakCategory::kTensorsRetained;
    finding.retained = "tensor storage";
    finding.bytes_per_step = tensor_growth;
    finding.steps_observed = report.steps;
    finding.site.op = "<not attributed in a forked child>";
    finding.hint = forkedChildHintFor(finding.category);
    report.findings.push_back(finding);
  }
  if (private_growth > 0 && private_growth > 4 * std::max(tensor_growth, 0.0)) {
    LeakFinding finding;
    finding.category = LeakCategory::kUntrackedGrowth;
    finding.retained = "private memory";
    finding.bytes_per_step = private_growth;
    finding.explained_bytes_per_step = std::max(tensor_growth, 0.0);
    finding.steps_observed = report.steps;
    finding.hint = forkedChildHintFor(finding.category);
    report.findings.push_back(finding);
  }
  std::sort(report.findings.begin(), report.findings.end(),
            [](const LeakFinding& a, const LeakFinding& b) {
              return a.bytes_per_step > b.bytes_per_step;
            });
  report.leak = !report.findings.empty();
  return report;
}

}  // namespace memseal::detect
