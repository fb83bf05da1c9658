// The program's end, as the detector judges it for `memseal run`: by the time exit handlers run,
// main() has returned (or Python has finalised) and what the loop kept is freed, so the verdict is
// the one of the last step boundaries while the loop ran (boundary reports, taken then), unless the
// report at the end keeps every cause they found. This says when a report was made as the program
// tore down, which boundary report stands for the loop, and which report is given (ProgramEnd).
// Tested alone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// A finding's cause as two reports of one run match it: category and op.
std::string causeOf(const LeakFinding& finding);

// Python has finalised by the time exit handlers run, so a report made then names no Python line.
// An earlier report, taken while the program ran, named them: a finding of the same cause in the
// later report takes the earlier one's frames, and so does each of its parts made by the same ops.
void framesFromEarlier(LeakReport& now, const LeakReport& earlier);

// Whether a report taken at a step boundary while the program runs was made as it tore down (its
// loop over, what the loop kept being freed): tracked tensor memory read before and after the
// report, against the most any boundary report began with. Below half of that, before or after:
// time windows end on memseal's own thread, and the program may free its loop's memory while the
// report is made, which then shows only part of what the loop kept.
bool madeDuringTeardown(std::int64_t live_before_report, std::int64_t live_after_report,
                        std::int64_t peak_live);

// Time windows go on after the program's loop: the windows in which it ended, freeing what its
// loop had kept (main's locals), are steps like the others. Seen in the report at exit: tensor
// memory that fell from at least half of its peak to below half in its last few steps, or by now
// (`live_bytes_now`, tracked tensor memory as the report is made: when no boundary came after the
// teardown, the steps' samples end before it). Then the step of the sample the fall began from;
// none otherwise.
std::optional<std::uint32_t> teardownFrom(const LeakReport& now, std::int64_t live_bytes_now);

// When a Python program's own code ended (its atexit, before the interpreter finalises): the step
// boundaries taken by then and tracked tensor memory at that moment.
struct ProgramCodeEnded {
  std::uint64_t steps = 0;
  std::int64_t live_bytes = 0;
};
// teardownFrom, looking only at what came before the program's own code ended when that is known:
// the interpreter's finalisation after it (freeing modules, running __del__) is teardown whatever
// it does, and takes many short windows on a busy machine, which hid the fall before them.
std::optional<std::uint32_t> teardownFrom(const LeakReport& now, std::int64_t live_bytes_now,
                                          const std::optional<ProgramCodeEnded>& code_ended);

// A report taken at a step boundary while the program ran, and when: a boundary report.
struct BoundaryReport {
  LeakReport report;
  std::chrono::steady_clock::time_point time{};
  std::uint64_t steps = 0;        // step boundaries taken when it began
  std::uint64_t steps_after = 0;  // and when it was done
};

// An earlier boundary report given at exit: its samples are those of `now` up to its last step.
void samplesUpTo(LeakReport& earlier, const LeakReport& now);

// The boundary report (of `reports`, the newest last) the report at exit is weighed against: the
// newest; when time windows saw the program tear down (`teardown_from`), the newest finished
// before the boundary that took the sample the fall began from, or the newest when none was.
const BoundaryReport* lastBeforeTeardown(const std::deque<BoundaryReport>& reports,
                                         std::optional<std::uint32_t> teardown_from);

// Steps a leak verdict must have held before the program's end to stand at exit: a boundary
// report's, to be given in place of a report that has no leak, and a build-up's that the end freed
// (LeakDetector::report(loop_ended_at)).
inline constexpr std::uint32_t kSettledSteps = 8;

// The report to give at exit, at `now_time`: `now`, the detector's report as the program ends, or
// the boundary report it is weighed against (lastBeforeTeardown), when that one saw a leak. By the
// time exit handlers run the program has freed what its loop kept (main's locals, Python's
// globals), so what a leak held can no longer be shown there. `now` is given when it keeps every
// cause the earlier report found (resident growth aside), when it judged phases (a build-up held
// and freed) and time windows saw no teardown, or when the earlier verdict came only in its last
// kSettledSteps steps (the last requests still in flight on a server's workers as the loop ended,
// not what a loop kept). Otherwise the earlier report, with the samples of `now` up to its last
// step and the origin of when it was taken.
LeakReport reportAtExit(LeakReport now, const std::deque<BoundaryReport>& reports,
                        std::optional<std::uint32_t> teardown_from,
                        std::chrono::steady_clock::time_point now_time);

// The program's end as an event of the detector's. `memseal run` hands it the reports it takes at
// step boundaries while the loop runs and the moment a Python program's own code ends; at exit it
// gives the verdict of the loop (reportAtExit), not one re-judged from what teardown left. Not
// thread-safe: the runtime holds its lock around each call.
class ProgramEnd {
 public:
  // Boundary reports kept: the newest may have been made as the program tore down (time windows
  // end on memseal's own thread), and at exit an earlier one is chosen, made before the fall began.
  static constexpr std::size_t kKeptReports = 4;

  // A report made at a step boundary, `done` when it was: tracked tensor memory before and after
  // it was made, and step boundaries taken then. Kept unless an earlier one was and this one was
  // made as the program tore down; its Python lines come from the earlier one where it names none.
  // The report kept, or null.
  const LeakReport* atStepBoundary(LeakReport report, std::int64_t live_before,
                                   std::int64_t live_after, std::uint64_t steps,
                                   std::uint64_t steps_after,
                                   std::chrono::steady_clock::time_point done);

  // A Python program's own code ended (its atexit, before the interpreter finalises).
  void codeEnded(ProgramCodeEnded ended) { code_ended_ = ended; }

  // The step the program's loop ended at, where the steps were time windows (`time_windows`),
  // which go on as the program tears down: teardownFrom of `now`, the detector's report as the
  // program ends, and `live_bytes_now`, tracked tensor memory then (before the program's own code
  // ended, where that is known). None for steps that stop with the loop.
  std::optional<std::uint32_t> loopEndedAt(const LeakReport& now, std::int64_t live_bytes_now,
                                           bool time_windows) const;

  // The report to give at exit, at `now_time`: reportAtExit of `now`, the detector's report as
  // the program ends (LeakDetector::report(loop_ended_at) where the loop's end is known, so that
  // what the teardown freed was held until then), weighed against the boundary reports.
  LeakReport atExit(LeakReport now, std::optional<std::uint32_t> loop_ended_at,
                    std::chrono::steady_clock::time_point now_time) const;

  const std::deque<BoundaryReport>& reports() const { return reports_; }

 private:
  std::deque<BoundaryReport> reports_;  // the newest last, kKeptReports at most
  std::int64_t peak_live_ = 0;          // tracked tensor bytes, the most as any report began
  std::optional<ProgramCodeEnded> code_ended_;
};

}  // namespace memseal::detect
