// How `memseal run` took a run's steps, as each step source (inject/step_source.h) counts them,
// and the report's lines that say it (LeakReport::steps_from, printed as its `steps:` lines). The
// sources only count; the words are written here, beside the rest of the report's text.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace memseal::report {

// One clock of a Python program's own steps, seen through PyTorch's hooks (FrameworkSteps).
struct ProgramClockSteps {
  enum class Signal { kOptimizerStep, kLoaderBatch, kModuleCall };
  Signal signal = Signal::kOptimizerStep;
  std::string object;  // as a person says it: "SGD", "DataLoader over MNIST", "Net"
  std::string phase;   // the detector's phase of its steps; named where the run had several clocks
  std::uint64_t steps = 0;
};

// Each outermost call of the op, function or region the user named (--step-on NAME).
struct NamedCallSteps {
  std::string name;
  std::uint64_t steps = 0;
};

// Time windows as steps: of the length the user chose (--interval), or sized to the run (a
// forked child's), from `length` at first.
struct WindowSteps {
  std::chrono::nanoseconds length{0};
  bool sized_to_the_run = false;
  std::uint64_t steps = 0;
};

// The loops found in the program's outermost ops (OpLoopSteps, the default source), the steps
// outside them, and the time windows taken where no loop was found.
struct OpLoopStepsTaken {
  struct Loop {
    std::string name;             // the detector's phase: "loop 1 (aten::linear)"
    std::string anchor_op;        // the op that starts each of its iterations, where its steps end
    std::size_t period = 0;       // ops in one iteration
    std::size_t found_after = 0;  // ops seen when it was found
    std::uint64_t steps = 0;
    std::uint64_t runs = 0;
    std::uint64_t iterations = 0;  // calls of its anchor; more than steps where some were one step
  };
  // Why time windows were taken, where they were.
  enum class WindowsBecause { kNotTaken, kOpsNeverRepeated, kLoopChangedBetweenChecks };

  std::vector<Loop> loops;
  std::uint64_t steps = 0;          // in all
  std::uint64_t outside_loops = 0;  // start-up, between loops, time windows
  // The program's own steps took over (ProgramClockSteps): these came before them.
  bool handed_over = false;
  std::size_t ops_seen = 0;  // outermost ops
  WindowsBecause windows_because = WindowsBecause::kNotTaken;
  std::size_t ops_when_windows_began = 0;  // on the program's busiest thread
  bool in_windows = false;                 // the steps are time windows now
  std::chrono::nanoseconds first_window{0};
  int windows_per_run = 0;  // then each window 1/windows_per_run of the time since tracking began
  // Steps ended by counting the followed loop's allocations instead of following every op.
  std::uint64_t counted_steps = 0;
  std::uint64_t allocations_per_iteration = 0;
  std::uint32_t counted_steps_between_checks = 0;  // against the op that starts each iteration
};

using StepsTaken = std::variant<ProgramClockSteps, NamedCallSteps, WindowSteps, OpLoopStepsTaken>;

// The report's lines: per source, what a step was and how many it ended ("one step per call of
// SGD.step() (the program's optimizer), seen through PyTorch's hooks (599 steps)"), in order.
std::vector<std::string> stepsFromLines(const std::vector<StepsTaken>& sources);

// "250 ms", "2 s": a window's length as the report says it.
std::string windowLengthText(std::chrono::nanoseconds length);

}  // namespace memseal::report
