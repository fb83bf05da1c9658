#include "inject/run_report_edits.h"

#include <cstddef>

namespace memseal::inject {

// A held finding's period in its loop's iterations, where that loop's steps took several.
void periodsInIterations(LeakReport& report,
                         const std::vector<std::pair<std::string, double>>& iterations_per_step) {
  for (LeakFinding& finding : report.findings) {
    if (!finding.freed || finding.freed->times <= 1) continue;
    for (const auto& [phase, ratio] : iterations_per_step) {
      if (phase == finding.freed->phase) {
        finding.freed->iterations_per_time = finding.freed->steps_per_time * ratio;
      }
    }
  }
}

// By the time exit handlers run, the program has freed its CUDA memory (or most of it): the
// devices' totals are the last step boundary's, as the loop left them.
void devicesAtTheLastStep(LeakReport& report) {
  for (DeviceMemorySummary& device : report.devices) {
    if (device.per_step.empty()) continue;
    device.allocated = device.per_step.back().allocated;
    device.reserved = device.per_step.back().reserved;
  }
}

std::string interimReportJson(const LeakReport& boundary_report, std::size_t newest_steps) {
  LeakReport report = boundary_report;
  auto keepNewest = [newest_steps](auto& samples) {
    if (samples.size() <= newest_steps) return false;
    samples.erase(samples.begin(), samples.end() - static_cast<std::ptrdiff_t>(newest_steps));
    return true;
  };
  bool cut = keepNewest(report.per_step);
  for (DeviceMemorySummary& device : report.devices) cut = keepNewest(device.per_step) || cut;
  if (cut) report.origin.newest_steps_kept = static_cast<std::uint32_t>(newest_steps);
  return report.toJson();
}

}  // namespace memseal::inject
