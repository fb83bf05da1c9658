#include "inject/run_config.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "inject/run_protocol.h"

namespace memseal::inject {

bool readConfig(RunConfig& config) {
  const char* directory = std::getenv(kEnvDirectory);
  if (directory == nullptr || *directory == '\0') return false;
  config.directory = directory;
  if (const char* output = std::getenv(kEnvOutput)) config.output = output;
  const char* follow = std::getenv(kEnvFollowFork);
  config.follow_fork = follow != nullptr && std::strcmp(follow, "1") == 0;
  const char* program_steps = std::getenv(kEnvProgramSteps);
  config.program_steps = program_steps == nullptr || std::strcmp(program_steps, "0") != 0;
  if (const char* warmup = std::getenv(kEnvWarmup)) {
    config.warmup = static_cast<std::uint32_t>(std::strtoul(warmup, nullptr, 10));
  }
  if (const char* events = std::getenv(kEnvMemoryVizEvents)) {
    config.memory_viz_events = static_cast<std::size_t>(std::strtoull(events, nullptr, 10));
  }
  if (const char* seconds = std::getenv(kEnvGatherSeconds)) {
    config.gather_timeout = std::chrono::seconds(std::strtoul(seconds, nullptr, 10));
  }
  const char* step = std::getenv(kEnvStep);
  std::string error;
  if (!parseStepRule(step == nullptr ? "auto" : step, &config.rule, &error)) {
    std::cerr << "memseal run: " << error << "\n";
    return false;
  }
  return true;
}

}  // namespace memseal::inject
