// The names of a step's phases (explain/phase_meter.h) as reports group and show them. Pure: no
// libtorch, so the report readers build without it.
#pragma once

#include <string>
#include <vector>

#include "memseal/fit.h"

namespace memseal::explain {

// "forward", "backward" or "update": the pass a phase is in.
std::string coarsePhaseOf(const std::string& phase);
// A phase for people: "update", "forward", "forward at op 3 (AddmmBackward0)", "backward at node
// 4 (ReluBackward0)".
std::string phaseTitle(const std::string& phase);
// Forward's ops and backward's nodes merged into one "forward" and one "backward", each at its
// highest; the order kept.
std::vector<PhasePeak> coarsePhases(const std::vector<PhasePeak>& phases);
// Whether a fit report lists a phase's model: a whole pass always, an op's or a node's phase
// where it limits the peak somewhere (`limiting`: the phases of its phase changes and the
// limiting phase).
bool listedPhase(const std::string& phase, const std::vector<std::string>& limiting);

}  // namespace memseal::explain
