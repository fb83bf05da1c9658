// What the runtime of `memseal run` changes in the detector's reports: the periods of held causes
// in loop iterations, the CUDA totals as the loop left them, and the interim report's samples.
// Which report is given at the program's end is the detector's (detect/program_end.h). Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::inject {

// A held finding's period in its loop's iterations, where that loop's steps took several:
// `iterations_per_step` is (phase name, iterations per step) per loop.
void periodsInIterations(LeakReport& report,
                         const std::vector<std::pair<std::string, double>>& iterations_per_step);

// By the time exit handlers run, the program has freed its CUDA memory (or most of it): the
// devices' totals are the last step boundary's, as the loop left them.
void devicesAtTheLastStep(LeakReport& report);

// The interim report streamed to the launcher as JSON, with the newest `newest_steps` per-step
// samples only (said in a note when some were left out): a file that grew with every step,
// written every second, would grow the program's heap step by step, and memseal judges the
// program's resident memory.
std::string interimReportJson(const LeakReport& boundary_report, std::size_t newest_steps);

}  // namespace memseal::inject
