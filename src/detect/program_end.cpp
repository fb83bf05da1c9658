#include "detect/program_end.h"

#include <algorithm>
#include <vector>

namespace memseal::detect {

namespace {

bool namesPythonLines(const AllocationSite& site) {
  return std::any_of(site.frames.begin(), site.frames.end(),
                     [](const StackFrame& frame) { return frame.library == "python"; });
}

}  // namespace

std::string causeOf(const LeakFinding& finding) {
  return std::string(categoryId(finding.category)) + "|" + finding.site.op;
}

void framesFromEarlier(LeakReport& now, const LeakReport& earlier_report) {
  for (LeakFinding& finding : now.findings) {
    auto earlier =
        std::find_if(earlier_report.findings.begin(), earlier_report.findings.end(),
                     [&](const LeakFinding& f) { return causeOf(f) == causeOf(finding); });
    if (earlier == earlier_report.findings.end()) continue;
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

bool madeDuringTeardown(std::int64_t live_before_report, std::int64_t live_after_report,
                        std::int64_t peak_live) {
  return 2 * std::min(live_before_report, live_after_report) < peak_live;
}

namespace {

std::optional<std::uint32_t> teardownFromSamples(const std::vector<StepSample>& samples,
                                                 std::int64_t live_bytes_now) {
  // A teardown frees what the loop kept within a few windows (more of them where windows are short
  // or the machine is busy), allocating little meanwhile: the fall is in the run of up to
  // kMaxFallSteps samples before now in which memory never rose by more than a sixteenth of its
  // peak from one sample to the next.
  constexpr std::size_t kMaxFallSteps = 8;
  constexpr std::size_t kMinSteps = 4;
  if (samples.size() < kMinSteps) return std::nullopt;
  // The steps' samples, then tracked memory now.
  std::vector<std::int64_t> live;
  live.reserve(samples.size() + 1);
  for (const StepSample& sample : samples) live.push_back(sample.live_bytes);
  live.push_back(live_bytes_now);
  std::int64_t rise_allowed = *std::max_element(live.begin(), live.end() - 1) / 16;
  auto run = live.end() - 1;
  while (run != live.begin() && live.end() - 1 - run < static_cast<std::ptrdiff_t>(kMaxFallSteps) &&
         *(run - 1) + rise_allowed >= *run) {
    --run;
  }
  // The fall began at the highest sample of the run (the later of equal ones), or before it where
  // memory was higher still.
  auto top = run;
  for (auto sample = run; sample + 1 != live.end(); ++sample) {
    if (*sample >= *top) top = sample;
  }
  while (top != live.begin() && *(top - 1) > *top) --top;
  std::int64_t peak = *std::max_element(live.begin(), top + 1);
  if (2 * *top < peak || 2 * live.back() >= peak) return std::nullopt;
  return samples[static_cast<std::size_t>(top - live.begin())].step;
}

}  // namespace

std::optional<std::uint32_t> teardownFrom(const LeakReport& now, std::int64_t live_bytes_now) {
  return teardownFromSamples(now.per_step, live_bytes_now);
}

std::optional<std::uint32_t> teardownFrom(const LeakReport& now, std::int64_t live_bytes_now,
                                          const std::optional<ProgramCodeEnded>& code_ended) {
  if (!code_ended) return teardownFromSamples(now.per_step, live_bytes_now);
  // The boundary that took sample N took the (N + 1)th step: samples of steps below `steps`.
  std::vector<StepSample> before;
  for (const StepSample& sample : now.per_step) {
    if (sample.step < code_ended->steps) before.push_back(sample);
  }
  return teardownFromSamples(before, code_ended->live_bytes);
}

void samplesUpTo(LeakReport& earlier, const LeakReport& now) {
  if (earlier.per_step.empty()) return;
  std::uint32_t last = earlier.per_step.back().step;
  earlier.per_step.clear();
  for (const StepSample& sample : now.per_step) {
    if (sample.step <= last) earlier.per_step.push_back(sample);
  }
}

const BoundaryReport* lastBeforeTeardown(const std::deque<BoundaryReport>& reports,
                                         std::optional<std::uint32_t> teardown_from) {
  if (reports.empty()) return nullptr;
  if (!teardown_from) return &reports.back();
  // The boundary that took sample N took the (N + 1)th step.
  for (auto report = reports.rbegin(); report != reports.rend(); ++report) {
    if (report->steps_after <= *teardown_from) return &*report;
  }
  return &reports.back();
}

LeakReport reportAtExit(LeakReport now, const std::deque<BoundaryReport>& reports,
                        std::optional<std::uint32_t> teardown_from,
                        std::chrono::steady_clock::time_point now_time) {
  const BoundaryReport* weighed = lastBeforeTeardown(reports, teardown_from);
  if (weighed == nullptr || !weighed->report.leak) return now;
  const LeakReport& earlier_leak = weighed->report;
  framesFromEarlier(now, earlier_leak);
  if (!now.leak && earlier_leak.detected_at_step &&
      earlier_leak.steps < *earlier_leak.detected_at_step + kSettledSteps) {
    return now;
  }
  // The detector keeps what a phase held and freed (and what the program freed at once as it
  // ended), so the report at exit is the one to give when it says so; otherwise unless it has
  // lost a finding of the earlier one: one the program freed a little at a time as it ended,
  // while time windows went on.
  bool phases_judged = std::any_of(now.findings.begin(), now.findings.end(),
                                   [](const LeakFinding& f) { return f.freed.has_value(); }) ||
                       !now.freed_build_ups.empty();
  if (phases_judged && !teardown_from) return now;
  bool kept_every_cause = now.leak;
  for (const LeakFinding& earlier : earlier_leak.findings) {
    // Resident growth is the weakest evidence: a report at exit without it lost nothing.
    if (earlier.category == LeakCategory::kUntrackedGrowth) continue;
    kept_every_cause = kept_every_cause && std::any_of(now.findings.begin(), now.findings.end(),
                                                       [&](const LeakFinding& f) {
                                                         return causeOf(f) == causeOf(earlier);
                                                       });
  }
  if (kept_every_cause) return now;
  LeakReport earlier = earlier_leak;
  if (weighed != &reports.back()) samplesUpTo(earlier, now);
  auto before = std::chrono::duration_cast<std::chrono::milliseconds>(now_time - weighed->time);
  earlier.origin.taken_after_step = weighed->steps;
  earlier.origin.ms_before_end = before.count();
  return earlier;
}

const LeakReport* ProgramEnd::atStepBoundary(LeakReport report, std::int64_t live_before,
                                             std::int64_t live_after, std::uint64_t steps,
                                             std::uint64_t steps_after,
                                             std::chrono::steady_clock::time_point done) {
  peak_live_ = std::max(peak_live_, live_before);
  if (!reports_.empty()) {
    // While the program tears down (its tensor memory mostly freed), its loop is over: the report
    // taken while it ran stands.
    if (madeDuringTeardown(live_before, live_after, peak_live_)) return nullptr;
    // Taken as Python finalises (what the loop kept still there), it names no Python line.
    framesFromEarlier(report, reports_.back().report);
    // Those older than the newest keep only their last step's sample: the steps' samples are the
    // detector's (up to 16,384), and the report at exit has them all (samplesUpTo gives them back).
    std::vector<StepSample>& samples = reports_.back().report.per_step;
    if (samples.size() > 1) samples = std::vector<StepSample>{samples.back()};  // frees the rest
  }
  reports_.push_back(BoundaryReport{std::move(report), done, steps, steps_after});
  while (reports_.size() > kKeptReports) reports_.pop_front();
  return &reports_.back().report;
}

std::optional<std::uint32_t> ProgramEnd::loopEndedAt(const LeakReport& now,
                                                     std::int64_t live_bytes_now,
                                                     bool time_windows) const {
  if (!time_windows) return std::nullopt;
  return teardownFrom(now, live_bytes_now, code_ended_);
}

LeakReport ProgramEnd::atExit(LeakReport now, std::optional<std::uint32_t> loop_ended_at,
                              std::chrono::steady_clock::time_point now_time) const {
  return reportAtExit(std::move(now), reports_, loop_ended_at, now_time);
}

}  // namespace memseal::detect
