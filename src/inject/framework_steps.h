// The steps of a Python program under `memseal run`, ended by its own machinery (an optimizer's
// step, a DataLoader's batch, the outermost module's call: framework_step_clock.h) once PyTorch's
// hooks report them (src/inject/python/step_hooks.py). From the first such signal on, the op-loop
// finder (StepBoundary) is handed over and takes no step: what it guessed before stays in the
// report's notes.
//
// Signals come on the program's Python threads, with the GIL held; a step is taken under the
// boundary's step lock (the runtime's one order: the GIL, then the step lock).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "inject/framework_step_clock.h"
#include "inject/step_cost.h"
#include "memseal/leak_detector.h"

namespace memseal::inject {

class StepBoundary;

class FrameworkSteps {
 public:
  // `after_step` runs after each step taken, on the thread that took it, outside the step lock.
  FrameworkSteps(StepBoundary& boundary, LeakDetector& detector, std::function<void()> after_step);

  void onEvent(const StepEvent& event);
  // No more steps (a forked child: the parent's steps are not its own).
  void stopSteps() { stopped_.store(true); }
  std::uint64_t stepsTaken();
  // The report's notes: what a step was, per clock the run had; empty before the first signal.
  std::vector<std::string> description();
  // Each clock's signals per step, where steps took several (signals closer together than a step
  // costs are one step).
  std::vector<std::pair<std::string, double>> iterationsPerStep();

 private:
  using Clock = std::chrono::steady_clock;
  // Under the boundary's step lock: the step ending now, which is `ending_use`'s (the clock's
  // before this signal), unless it comes closer than a step costs (false: not taken).
  bool stepLocked(const ClockDecision& decision, std::size_t ending_use, Clock::time_point now);

  StepBoundary& boundary_;
  LeakDetector& detector_;
  std::function<void()> after_step_;
  std::atomic<bool> stopped_{false};  // set without a lock: in a forked child, any lock may be held
  std::mutex clock_mutex_;            // guards clock_ and phase_steps_; taken before the step lock
  FrameworkStepClock clock_;
  std::vector<std::uint64_t> phase_steps_;  // per clock use: the steps taken
  // Under the boundary's step lock.
  std::uint64_t steps_taken_ = 0;
  Clock::time_point last_step_{};
  bool last_tick_taken_ = false;  // the clock's last end of a step was taken (not coalesced)
  StepCost step_cost_;
};

}  // namespace memseal::inject
