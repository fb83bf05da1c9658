#include "detect/step_records.h"

#include <algorithm>

#include "common/bounded_samples.h"

namespace memseal::detect {

namespace {

// The sample of `step`, or of the nearest step before it that has one (samples are thinned).
const StepSample* sampleAtOrBefore(const std::vector<StepSample>& samples, std::uint32_t step) {
  auto after =
      std::upper_bound(samples.begin(), samples.end(), step,
                       [](std::uint32_t s, const StepSample& sample) { return s < sample.step; });
  return after == samples.begin() ? nullptr : &*(after - 1);
}

}  // namespace

StepRecords::StepRecords(ResidentMemoryReader::Measure measure) : resident_(measure) {
  // Thinned in place (common::thinOlderHalf), they never reallocate: see ownBytes.
  per_step_.reserve(kMaxStepSamples + 1);
  resident_readings_.reserve(kMaxStepSamples + 1);
}

void StepRecords::readResidentMemory(StepSample& sample, std::int64_t start_ns, bool forming,
                                     bool after_warmup) {
  if (!resident_schedule_.due(sample.step, start_ns, forming) && !resident_readings_.empty()) {
    sample.resident_bytes = resident_readings_.back().resident_bytes;
    return;
  }
  std::int64_t read = resident_.read();  // 0: not readable here
  // A loop of ever-new tensor sizes grows malloc's free bytes for hundreds of thousands of steps,
  // then levels off: not memory in use.
  std::int64_t not_in_use = ownBytes() + (read > 0 ? resident_.mallocFreeBytes(after_warmup) : 0);
  sample.resident_bytes = read > 0 ? std::max<std::int64_t>(0, read - not_in_use) : 0;
  resident_schedule_.noteDone(sample.step, start_ns, steadyNowNs());
  resident_high_ = std::max(resident_high_, sample.resident_bytes);
  resident_readings_.push_back(sample);
  resident_readings_most_ = std::max(resident_readings_most_, resident_readings_.size());
  common::thinOlderHalf(resident_readings_, kMaxStepSamples);
}

void StepRecords::add(StepSample sample) {
  if (!per_step_.empty()) sample.graph_nodes_alive = per_step_.back().graph_nodes_alive;
  per_step_.push_back(sample);
  per_step_most_ = std::max(per_step_most_, per_step_.size());
  common::thinOlderHalf(per_step_, kMaxStepSamples);
}

std::int64_t StepRecords::residentGrowth(std::uint32_t first, std::uint32_t last) const {
  const StepSample* before = first > 0 ? sampleAtOrBefore(resident_readings_, first - 1) : nullptr;
  const StepSample* after = sampleAtOrBefore(resident_readings_, last);
  if (before == nullptr || after == nullptr) return 0;
  return std::max<std::int64_t>(0, after->resident_bytes - before->resident_bytes);
}

std::int64_t StepRecords::ownBytes() const {
  return static_cast<std::int64_t>((per_step_most_ + resident_readings_most_) * sizeof(StepSample));
}

}  // namespace memseal::detect
