// Loops that leak on purpose, and healthy loops whose memory rises and levels off. Shared by
// `memseal demo`, the detector's test suite and the benchmarks.
#pragma once

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
};

const std::vector<ExampleLoop>& exampleLoops();
const ExampleLoop& exampleLoop(const std::string& name);  // throws std::out_of_range

}  // namespace memseal::examples
