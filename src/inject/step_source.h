// Where `memseal run` ends a program's steps. Each source decides when a step ends, from what it
// sees of the program, and takes it in the run's StepLedger; what the steps mean (growth, leaks,
// phases) is the leak detector's. The sources:
//   OpLoopSteps     (op_loop_steps.h) the loops of the program's outermost ops, learned and
//                   followed (their iterations counted by allocations once alike), or time windows
//                   sized to the run where no loop is found: the default;
//   NamedSteps      (named_steps.h) each outermost call of the op, TorchScript function or named
//                   region the user named (--step-on NAME);
//   IntervalSteps   (time_windows.h) time windows of a fixed length (--interval);
//   FrameworkSteps  (framework_steps.h) a Python program's own steps, seen through PyTorch's hooks:
//                   an optimizer's step(), a DataLoader's batch, the outermost module's call.
//                   Beside OpLoopSteps, it takes over from it at its first clock (handOver).
// The runtime makes one of the first three from the StepRule (makeStepSource) and, in a Python
// program run with the default rule, FrameworkSteps beside it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "inject/step_rule.h"
#include "report/steps_taken.h"

namespace memseal::inject {

class StepLedger;

class StepSource {
 public:
  virtual ~StepSource() = default;

  // What a step was and how many this source ended, as the report says in words
  // (report::stepsFromLines); empty when it has nothing to say.
  virtual std::vector<report::StepsTaken> stepsTaken() = 0;
  // Per phase, the source's signals (a loop's iterations, an optimizer's steps) per step, where
  // steps took several: signals closer together than a step costs are one step.
  virtual std::vector<std::pair<std::string, double>> iterationsPerStep() = 0;
  // Another source ends the steps from now on: this one takes no more and lets go of what it
  // watched. What it took before stays in stepsTaken().
  virtual void handOver() {}
  // The runtime's own thread: how long it may sleep before tick() has work, and that work (time
  // windows, a time limit).
  virtual std::chrono::nanoseconds untilNextTick() const { return kNothingTimed; }
  virtual void tick() {}

  static constexpr std::chrono::nanoseconds kNothingTimed = std::chrono::minutes(1);
};

// The source the rule names. `watch_ops_automatically_while_counting`: the user did not choose
// which steps' ops the detector watches (OpLoopSteps: counted steps are whole iterations).
std::unique_ptr<StepSource> makeStepSource(const StepRule& rule, StepLedger& ledger,
                                           bool watch_ops_automatically_while_counting);

}  // namespace memseal::inject
