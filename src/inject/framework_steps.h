// The steps of a Python program under `memseal run`, ended by its own machinery (an optimizer's
// step, a DataLoader's batch, the outermost module's call: framework_step_clock.h) once PyTorch's
// hooks report them (src/inject/python/step_hooks.py): a StepSource (step_source.h). From the first
// clock on, the source that guessed the steps from the program's ops is handed over and takes no
// more: what it guessed before stays in the report's notes.
//
// Signals come on the program's Python threads, with the GIL held; a step is taken in the run's
// StepLedger (the runtime's one order: the GIL, the clock's lock, then the ledger's lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "inject/framework_step_clock.h"
#include "inject/step_source.h"

namespace memseal::inject {

class StepLedger;

class FrameworkSteps final : public StepSource {
 public:
  // `guessed`: the source that ends the steps until the program's own first clock.
  FrameworkSteps(StepLedger& ledger, StepSource& guessed);

  void onEvent(const StepEvent& event);
  // What a step was, per clock the run had; empty before the first signal.
  std::vector<report::StepsTaken> stepsTaken() override;
  // Each clock's signals per step, where steps took several.
  std::vector<std::pair<std::string, double>> iterationsPerStep() override;

 private:
  using Clock = std::chrono::steady_clock;
  // Under the ledger's lock: the step ending now, which is `ending_use`'s (the clock's before this
  // signal), unless it comes closer than a step costs (false: not taken).
  bool stepLocked(const ClockDecision& decision, std::size_t ending_use, Clock::time_point now);

  StepLedger& ledger_;
  StepSource& guessed_;
  std::mutex clock_mutex_;  // guards clock_ and phase_steps_; taken before the ledger's lock
  FrameworkStepClock clock_;
  std::vector<std::uint64_t> phase_steps_;  // per clock use: the steps taken
  // Under the ledger's lock.
  std::uint64_t steps_taken_ = 0;
  bool last_tick_taken_ = false;  // the clock's last end of a step was taken (not coalesced)
};

}  // namespace memseal::inject
