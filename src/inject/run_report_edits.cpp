#include "inject/run_report_edits.h"

#include <algorithm>

namespace memseal::inject {

namespace {

bool namesPythonLines(const AllocationSite& site) {
  return std::any_of(site.frames.begin(), site.frames.end(),
                     [](const StackFrame& frame) { return frame.library == "python"; });
}

}  // namespace

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

std::string causeOf(const LeakFinding& finding) {
  return std::string(categoryId(finding.category)) + "|" + finding.site.op;
}

// Python has finalised by the time exit handlers run, so a report made then names no Python line.
// An earlier snapshot, taken while the program ran, named them: a finding of the same cause in the
// later report takes the snapshot's frames, and so does each of its parts made by the same ops.
void framesFromTheSnapshot(LeakReport& now, const LeakReport& snapshot) {
  for (LeakFinding& finding : now.findings) {
    auto earlier =
        std::find_if(snapshot.findings.begin(), snapshot.findings.end(),
                     [&](const LeakFinding& f) { return causeOf(f) == causeOf(finding); });
    if (earlier == snapshot.findings.end()) continue;
    if (!namesPythonLines(finding.site) && namesPythonLines(earlier->site)) {
      finding.site.frames = earlier->site.frames;
    }
    for (LeakPart& part : finding.parts) {
      if (namesPythonLines(part.site)) continue;
      for (const LeakPart& earlier_part : earlier->parts) {
        if (earlier_part.site.op == part.site.op &&
            earlier_part.site.outer_op == part.site.outer_op &&
            namesPythonLines(earlier_part.site)) {
          part.site.frames = earlier_part.site.frames;
          break;
        }
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

std::string interimReportJson(const LeakReport& snapshot, std::size_t newest_steps) {
  LeakReport report = snapshot;
  auto keepNewest = [newest_steps](auto& samples) {
    if (samples.size() <= newest_steps) return false;
    samples.erase(samples.begin(), samples.end() - static_cast<std::ptrdiff_t>(newest_steps));
    return true;
  };
  bool cut = keepNewest(report.per_step);
  for (DeviceMemorySummary& device : report.devices) cut = keepNewest(device.per_step) || cut;
  if (cut) {
    report.notes.push_back(
        "memseal run: this report, taken while the program ran, keeps the newest " +
        std::to_string(newest_steps) + " steps' samples");
  }
  return report.toJson();
}

bool endedByTeardown(const LeakReport& now) {
  constexpr std::size_t kEndSteps = 3;
  const std::vector<StepSample>& steps = now.per_step;
  if (steps.size() <= kEndSteps) return false;
  std::int64_t peak = 0;
  for (std::size_t i = 0; i + kEndSteps < steps.size(); ++i) {
    peak = std::max(peak, steps[i].live_bytes);
  }
  std::int64_t before_the_end = steps[steps.size() - kEndSteps - 1].live_bytes;
  return 2 * before_the_end >= peak && 2 * steps.back().live_bytes < peak;
}

}  // namespace memseal::inject
