// The program's end, as the detector judges it for `memseal run`: by the time exit handlers run,
// main() has returned (or Python has finalised) and what the loop kept is freed, so the verdict is
// the one of the last step boundaries while the loop ran (snapshots taken then), unless the report
// at the end keeps every cause they found. This says when a report was made as the program tore
// down, which snapshot stands for the loop, and which report is given (reportAtExit). Pure: tested
// alone.
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
// An earlier snapshot, taken while the program ran, named them: a finding of the same cause in the
// later report takes the snapshot's frames, and so does each of its parts made by the same ops.
void framesFromTheSnapshot(LeakReport& now, const LeakReport& snapshot);

// Whether a report taken at a step boundary while the program runs was made as it tore down (its
// loop over, what the loop kept being freed): tracked tensor memory read before and after the
// report, against the most any snapshot began with. Below half of that, before or after: time
// windows end on memseal's own thread, and the program may free its loop's memory while the
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

// A report taken at a step boundary while the program ran, and when.
struct Snapshot {
  LeakReport report;
  std::chrono::steady_clock::time_point time{};
  std::uint64_t steps = 0;        // step boundaries taken when it began
  std::uint64_t steps_after = 0;  // and when it was done
};

// Adds the newest snapshot, keeping `most`. Those older than the newest keep only their last
// step's sample: the steps' samples are the detector's (up to 16,384), and the report at exit has
// them all (samplesUpTo gives them back).
void keepSnapshot(std::deque<Snapshot>& snapshots, Snapshot newest, std::size_t most);
// An earlier snapshot given at exit: its samples are those of `now` up to its last step.
void samplesUpTo(LeakReport& earlier, const LeakReport& now);

// The snapshot (of `snapshots`, the newest last) the report at exit is weighed against: the newest;
// when time windows saw the program tear down (`teardown_from`), the newest finished before the
// boundary that took the sample the fall began from, or the newest when none was.
const Snapshot* snapshotBeforeTeardown(const std::deque<Snapshot>& snapshots,
                                       std::optional<std::uint32_t> teardown_from);

// Steps a snapshot's leak verdict must have held to be given at exit in place of a report that
// has no leak.
inline constexpr std::uint32_t kSettledSteps = 8;

// The report to give at exit, at `now_time`: `now`, the detector's report as the program ends, or
// the snapshot it is weighed against (snapshotBeforeTeardown), when that one saw a leak. By the
// time exit handlers run the program has freed what its loop kept (main's locals, Python's
// globals), so what a leak held can no longer be shown there. `now` is given when it keeps every
// cause the snapshot found (resident growth aside), when it judged phases (a build-up held and
// freed) and time windows saw no teardown, or when the snapshot's verdict came only in its last
// kSettledSteps steps (the last requests still in flight on a server's workers as the loop ended,
// not what a loop kept). Otherwise the snapshot, with the samples of `now` up to its last step and
// a note of when it was taken.
LeakReport reportAtExit(LeakReport now, const std::deque<Snapshot>& snapshots,
                        std::optional<std::uint32_t> teardown_from,
                        std::chrono::steady_clock::time_point now_time);

}  // namespace memseal::detect
