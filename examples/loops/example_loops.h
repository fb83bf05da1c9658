// Loops that leak on purpose, and healthy loops whose memory rises and levels off. Shared by
// `memseal demo`, the detector's test suite and the benchmarks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace memseal::examples {

struct ExampleLoop {
  std::string name;
  std::string code;      // the offending (or typical) line, as a user would write it
  std::string expected;  // the category id a leak must get; empty for a healthy loop
  bool in_demo = false;
  // Builds fresh state (model, optimizer, containers) and returns the step function.
  std::function<std::function<void(int)>()> make;
  // Steps it needs at least to show its pattern (slow growth is judged over a long run).
  std::uint32_t min_steps = 0;
  // Judged by resident memory: meaningless under AddressSanitizer, whose quarantine grows it.
  bool resident_only = false;
  // Allocates differently every step (new shapes): a step whose ops are not watched cannot be
  // attributed by replaying a watched one, so its leak is named by stack, not by op.
  bool allocations_vary = false;
};

const std::vector<ExampleLoop>& exampleLoops();
// The loops of the diagnosis that must hold on real programs: leaks whose shapes vary, one finding
// per cause, graph leaks beside native ones, the create_graph cycle, slow native growth, and the
// healthy loops that only look like them. Part of exampleLoops().
void addDiagnosisLoops(std::vector<ExampleLoop>& loops);
const ExampleLoop& exampleLoop(const std::string& name);  // throws std::out_of_range

}  // namespace memseal::examples
