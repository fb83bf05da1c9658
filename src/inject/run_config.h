// What the launcher of `memseal run` asks of the runtime, read from the environment it sets
// (run_protocol.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "inject/run_protocol.h"
#include "inject/step_rule.h"

namespace memseal::inject {

struct RunConfig {
  std::string directory;
  std::string output;  // text report on SIGUSR1; empty: stderr
  bool follow_fork = false;
  bool program_steps = true;  // a Python program's own steps (FrameworkSteps), unless --op-loops
  std::uint32_t warmup = 5;
  std::size_t memory_viz_events = 0;  // 0: no memory_viz trace
  // Rank 0 of a job across machines: how long it waits for the other nodes' reports at its exit.
  std::chrono::seconds gather_timeout{kDefaultGatherSeconds};
  StepRule rule;
};

// False when the process was not started by `memseal run` (no run folder) or its step rule is
// malformed (said on stderr).
bool readConfig(RunConfig& config);

}  // namespace memseal::inject
