#include "explain/phase_names.h"

#include <algorithm>

namespace memseal::explain {

std::string coarsePhaseOf(const std::string& phase) {
  if (phase.rfind("backward:", 0) == 0) return "backward";
  if (phase.rfind("forward:", 0) == 0) return "forward";
  return phase;
}

// The name is "pass:K:Node" (phase_meter.h); the pass alone is its own title.
std::string phaseTitle(const std::string& phase) {
  std::string pass = coarsePhaseOf(phase);
  if (pass == phase) return phase;
  std::size_t first = phase.find(':');
  std::size_t second = phase.find(':', first + 1);
  if (second == std::string::npos) return phase;
  return pass + (pass == "forward" ? " at op " : " at node ") +
         phase.substr(first + 1, second - first - 1) + " (" + phase.substr(second + 1) + ")";
}

std::vector<PhasePeak> coarsePhases(const std::vector<PhasePeak>& phases) {
  std::vector<PhasePeak> coarse;
  for (const PhasePeak& phase : phases) {
    std::string name = coarsePhaseOf(phase.phase);
    if (!coarse.empty() && coarse.back().phase == name) {
      coarse.back().peak_bytes = std::max(coarse.back().peak_bytes, phase.peak_bytes);
    } else {
      coarse.push_back({name, phase.peak_bytes});
    }
  }
  return coarse;
}

bool listedPhase(const std::string& phase, const std::vector<std::string>& limiting) {
  return coarsePhaseOf(phase) == phase ||
         std::find(limiting.begin(), limiting.end(), phase) != limiting.end();
}

}  // namespace memseal::explain
