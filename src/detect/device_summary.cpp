#include "detect/device_summary.h"

#include <algorithm>
#include <string>

#include "track/device_events.h"

namespace memseal::detect {

std::vector<DeviceStepPoint> thinDeviceSteps(const std::vector<track::DeviceStepSample>& samples,
                                             std::size_t limit) {
  std::vector<DeviceStepPoint> points;
  if (samples.empty()) return points;
  limit = std::max<std::size_t>(limit, 1);
  std::size_t stretch = (samples.size() + limit - 1) / limit;
  points.reserve((samples.size() + stretch - 1) / stretch);
  for (std::size_t start = 0; start < samples.size(); start += stretch) {
    std::size_t end = std::min(samples.size(), start + stretch);
    DeviceStepPoint point;
    point.step = samples[end - 1].step;
    for (std::size_t i = start; i < end; ++i) {
      point.allocated = std::max(point.allocated, samples[i].allocated);
      point.reserved = std::max(point.reserved, samples[i].reserved);
    }
    points.push_back(point);
  }
  return points;
}

std::int64_t deviceAllocatedBytes() {
  std::uint64_t allocated = 0;
  if (!track::deviceEventsSeen()) return 0;
  track::readDeviceLedger([&](const track::DeviceMemoryLedger& ledger) {
    for (int device : ledger.devices()) allocated += ledger.totals(device).allocated;
  });
  return static_cast<std::int64_t>(allocated);
}

std::vector<DeviceMemorySummary> summarizeDevices(std::uint32_t warmup) {
  std::vector<DeviceMemorySummary> summaries;
  if (!track::deviceEventsSeen()) return summaries;
  track::readDeviceLedger([&](const track::DeviceMemoryLedger& ledger) {
    for (int device : ledger.devices()) {
      detect::DeviceMemoryDiagnosis diagnosis =
          detect::diagnoseDevice(ledger.stepSamples(device), warmup, ledger.lastOom(device));
      // The totals and free space are the ledger's now: the report may come mid-step, after the
      // last sample, and the peaks cover warm-up too.
      track::DeviceMemoryTotals totals = ledger.totals(device);
      track::FreeSpace space = ledger.freeSpace(device);
      DeviceMemorySummary summary;
      summary.device = "cuda:" + std::to_string(device);
      summary.verdict = detect::deviceVerdictName(diagnosis.verdict);
      summary.allocated = totals.allocated;
      summary.reserved = totals.reserved;
      summary.peak_allocated = totals.peak_allocated;
      summary.peak_reserved = totals.peak_reserved;
      summary.inactive_split_bytes = space.inactive_split_bytes;
      summary.largest_free_extent = space.largest_free_extent;
      summary.hint = diagnosis.hint;
      summary.per_step = thinDeviceSteps(ledger.stepSamples(device), kMaxDeviceSummarySteps);
      summaries.push_back(std::move(summary));
    }
  });
  return summaries;
}

}  // namespace memseal::detect
