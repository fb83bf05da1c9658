#include "detect/device_findings.h"

#include <string>
#include <vector>

#include "analyze/live_view.h"
#include "common/text.h"
#include "detect/device_diagnosis.h"
#include "memseal/tracker.h"
#include "track/device_events.h"

namespace memseal::detect {

namespace {

std::string bytes(std::uint64_t value) {
  return common::bytesText(static_cast<std::int64_t>(value));
}

// Whether a finding (or one of its parts) is about tensors on `device` ("cuda:N").
bool namesTensorsOn(const std::vector<LeakFinding>& findings, const std::string& device) {
  for (const LeakFinding& finding : findings) {
    if (finding.tensor.device == device) return true;
    for (const LeakPart& part : finding.parts) {
      if (part.tensor.device == device) return true;
    }
  }
  return false;
}

}  // namespace

namespace {

struct DeviceView {
  int device = 0;
  detect::DeviceMemoryDiagnosis diagnosis;
  // Sites of blocks made after warm-up that outlived the step after their own: a step's boundary
  // may fall inside an iteration (activations made before it are freed after it), so only blocks
  // older than that are kept ones.
  std::vector<track::LiveBlockGroup> kept;
};

std::vector<DeviceView> deviceViews(std::uint32_t warmup) {
  std::uint32_t now = memseal::currentStep();
  std::vector<DeviceView> views;
  track::readDeviceLedger([&](const track::DeviceMemoryLedger& ledger) {
    for (int device : ledger.devices()) {
      DeviceView view;
      view.device = device;
      view.diagnosis =
          detect::diagnoseDevice(ledger.stepSamples(device), warmup, ledger.lastOom(device));
      if (now >= warmup + 2) view.kept = ledger.liveBlocksBySite(device, 4, warmup, now - 2);
      views.push_back(std::move(view));
    }
  });
  return views;
}

// A device whose allocated memory grows: the census's findings of its tensors say it, or, when
// nothing outlives its step, its summary (as "work"); else the allocator's own finding.
void addDeviceGrowth(const DeviceView& view, const std::string& name, const std::string& totals,
                     LeakReport& report) {
  const detect::DeviceMemoryDiagnosis& diagnosis = view.diagnosis;
  std::string growth = bytes(static_cast<std::uint64_t>(diagnosis.leak_bytes_per_step)) + "/step";
  std::string shown_as = "blocks";
  // The census already found the kept CUDA tensors, with their category and fix.
  if (namesTensorsOn(report.findings, name)) shown_as = "tensors";
  // Each step needs more than the one before, and gives it back: a growing batch or sequence, not
  // kept tensors. It still ends in an out-of-memory error.
  if (shown_as == "blocks" && view.kept.empty()) shown_as = "work";
  for (DeviceMemorySummary& summary : report.devices) {
    if (summary.device != name) continue;
    summary.growth_per_step = diagnosis.leak_bytes_per_step;
    summary.growth_shown_as = shown_as;
  }
  if (shown_as != "blocks") return;
  // Blocks the census could not name (made outside watched ops, or before tensors were recorded):
  // the allocator's own view is the finding.
  LeakFinding finding;
  finding.category = LeakCategory::kTensorsRetained;
  finding.retained = "CUDA memory";
  finding.bytes_per_step = diagnosis.leak_bytes_per_step;
  finding.steps_observed = static_cast<std::uint32_t>(diagnosis.observed_samples);
  finding.steps_with_survivors = finding.steps_observed;
  for (const track::LiveBlockGroup& group : view.kept) {
    LeakPart part;
    part.retained = "CUDA memory";
    part.site = analyze::describeSite(group.site);
    part.survivors = static_cast<std::int64_t>(group.blocks);
    part.survivor_bytes = static_cast<std::int64_t>(group.bytes);
    part.steps_observed = finding.steps_observed;
    finding.survivors += part.survivors;
    finding.survivor_bytes += part.survivor_bytes;
    finding.parts.push_back(std::move(part));
  }
  if (!finding.parts.empty()) finding.site = finding.parts.front().site;
  finding.hint = "On " + name + ", memory allocated to tensors grows +" + growth +
                 " without levelling off (" + totals + "): tensors made after warm-up are kept. " +
                 diagnosis.hint;
  report.findings.push_back(std::move(finding));
}

}  // namespace

void addDeviceFindings(std::uint32_t warmup, LeakReport& report) {
  if (!track::deviceEventsSeen()) return;
  std::vector<DeviceView> views = deviceViews(warmup);
  std::string oom_path = track::lastOomForensicsPath();
  for (const DeviceView& view : views) {
    const detect::DeviceMemoryDiagnosis& diagnosis = view.diagnosis;
    std::string name = "cuda:" + std::to_string(view.device);
    std::string totals = bytes(diagnosis.allocated) + " allocated, " + bytes(diagnosis.reserved) +
                         " reserved by PyTorch's caching allocator";
    // Steady, caching and fragmentation: the summary's verdict and hint say it.
    if (diagnosis.verdict == detect::DeviceVerdict::kLeak) {
      addDeviceGrowth(view, name, totals, report);
    }
  }
  report.cuda_oom_file = oom_path;
}

}  // namespace memseal::detect
