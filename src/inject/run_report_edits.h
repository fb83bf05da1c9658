// What the runtime of `memseal run` changes in the detector's reports: the periods of held causes
// in loop iterations, Python lines taken from an earlier snapshot once Python has finalised, and
// the CUDA totals as the loop left them; the interim report's samples.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::inject {

// A held finding's period in its loop's iterations, where that loop's steps took several:
// `iterations_per_step` is (phase name, iterations per step) per loop.
void periodsInIterations(LeakReport& report,
                         const std::vector<std::pair<std::string, double>>& iterations_per_step);

// A finding's cause as two reports of one run match it: category and op.
std::string causeOf(const LeakFinding& finding);

// Python has finalised by the time exit handlers run, so a report made then names no Python line.
// An earlier snapshot, taken while the program ran, named them: a finding of the same cause in the
// later report takes the snapshot's frames, and so does each of its parts made by the same ops.
void framesFromTheSnapshot(LeakReport& now, const LeakReport& snapshot);

// By the time exit handlers run, the program has freed its CUDA memory (or most of it): the
// devices' totals are the last step boundary's, as the loop left them.
void devicesAtTheLastStep(LeakReport& report);

// The interim report streamed to the launcher as JSON, with the newest `newest_steps` per-step
// samples only (said in a note when some were left out): a file that grew with every step,
// written every second, would grow the program's heap step by step, and memseal judges the
// program's resident memory.
std::string interimReportJson(const LeakReport& snapshot, std::size_t newest_steps);

// Time windows go on after the program's loop: the window in which it ended, freeing at once what
// its loop had kept (main's locals), is a step like the others. Seen in the report at exit: tensor
// memory that stayed above half of its peak until its last few steps and fell below half in them.
bool endedByTeardown(const LeakReport& now);

}  // namespace memseal::inject
