#include "report/steps_taken.h"

#include <cstdio>

#include "common/text.h"

namespace memseal::report {

namespace {

std::string stepsInParentheses(std::uint64_t steps) {
  return " (" + common::countedText(steps, "step") + ")";
}

void addLines(const ProgramClockSteps& clock, std::vector<std::string>& lines) {
  std::string step_is;
  switch (clock.signal) {
    case ProgramClockSteps::Signal::kOptimizerStep:
      step_is = "one step per call of " + clock.object + ".step() (the program's optimizer)";
      break;
    case ProgramClockSteps::Signal::kLoaderBatch:
      step_is = "one step per call of next() on the batches of " + clock.object;
      break;
    case ProgramClockSteps::Signal::kModuleCall:
      step_is = "one step per call of " + clock.object + " (the outermost module)";
      break;
  }
  std::string line = step_is + ", seen through PyTorch's hooks";
  if (!clock.phase.empty()) line += "; phase \"" + clock.phase + "\"";
  lines.push_back(line + stepsInParentheses(clock.steps));
}

void addLines(const NamedCallSteps& named, std::vector<std::string>& lines) {
  lines.push_back("one step per outermost call of " + named.name + " (--step-on)" +
                  stepsInParentheses(named.steps));
}

void addLines(const WindowSteps& windows, std::vector<std::string>& lines) {
  std::string length = windowLengthText(windows.length);
  lines.push_back((windows.sized_to_the_run ? "time windows sized to the run, from " + length
                                            : "time windows of " + length + " (--interval)") +
                  stepsInParentheses(windows.steps));
}

// Why the op-loop source took time windows, and how long they are.
std::string windowsTaken(const OpLoopStepsTaken& taken) {
  auto first_ms = std::chrono::duration_cast<std::chrono::milliseconds>(taken.first_window);
  std::string because =
      taken.windows_because == OpLoopStepsTaken::WindowsBecause::kLoopChangedBetweenChecks
          ? "the loop's ops repeated, but changed between checks"
          : "the program's outermost ops did not repeat (" +
                std::to_string(taken.ops_when_windows_began) + " ops seen on its busiest thread)";
  return "time windows sized to the run (" + std::to_string(first_ms.count()) +
         " ms at first, then 1/" + std::to_string(taken.windows_per_run) +
         " of the time since tracking started): " + because;
}

std::string loopLine(const OpLoopStepsTaken::Loop& loop) {
  std::string together =
      loop.iterations > loop.steps
          ? " (" + std::to_string(loop.iterations) +
                " iterations: those closer together than a step costs were one step)"
          : "";
  return loop.name + ": one step per call of " + loop.anchor_op +
         ", the op that starts each of its iterations (" + std::to_string(loop.period) +
         " ops, found after " + std::to_string(loop.found_after) +
         " ops): " + common::countedText(loop.steps, "step") + " in " +
         common::countedText(loop.runs, "run") + together;
}

void addLines(const OpLoopStepsTaken& taken, std::vector<std::string>& lines) {
  bool windows_taken = taken.windows_because != OpLoopStepsTaken::WindowsBecause::kNotTaken;
  // The program's own steps took over: what was guessed before them, if anything, is history.
  if (taken.handed_over) {
    if (taken.steps == 0) return;
    lines.push_back(common::countedText(taken.steps, "step") +
                    " before the program's own steps began, from " +
                    (taken.loops.empty() ? "time windows" : "loops found in its ops"));
    return;
  }
  if (taken.loops.empty()) {
    if (taken.in_windows && windows_taken) {
      lines.push_back(windowsTaken(taken) + stepsInParentheses(taken.steps));
      return;
    }
    lines.push_back("the program ended before its loop was found (" +
                    std::to_string(taken.ops_seen) +
                    " outermost ops seen: too few iterations, or ops that never repeat); "
                    "--interval DURATION or --step-on NAME sets the steps" +
                    stepsInParentheses(taken.steps));
    return;
  }
  std::string summary = common::countedText(taken.steps, "step") + " in " +
                        common::countedText(taken.loops.size(), "loop") +
                        " found in the program's ops";
  if (taken.outside_loops > 0) {
    summary += ", and " + std::to_string(taken.outside_loops) +
               " outside them (start-up, between loops" + (windows_taken ? ", time windows)" : ")");
  }
  lines.push_back(summary);
  for (const OpLoopStepsTaken::Loop& loop : taken.loops) lines.push_back(loopLine(loop));
  if (taken.counted_steps > 0) {
    lines.push_back(std::to_string(taken.counted_steps) +
                    " of these steps were ended by counting the loop's allocations (" +
                    std::to_string(taken.allocations_per_iteration) +
                    " an iteration) instead of following every op, checked against the op "
                    "that starts each iteration every " +
                    std::to_string(taken.counted_steps_between_checks) + " steps");
  }
  if (windows_taken && taken.in_windows) lines.push_back("then " + windowsTaken(taken));
}

}  // namespace

std::string windowLengthText(std::chrono::nanoseconds length) {
  char text[32];
  double ms = static_cast<double>(length.count()) / 1e6;
  if (ms >= 1000) {
    std::snprintf(text, sizeof(text), "%g s", ms / 1000);
  } else {
    std::snprintf(text, sizeof(text), "%g ms", ms);
  }
  return text;
}

std::vector<std::string> stepsFromLines(const std::vector<StepsTaken>& sources) {
  std::vector<std::string> lines;
  for (const StepsTaken& source : sources) {
    std::visit([&](const auto& taken) { addLines(taken, lines); }, source);
  }
  return lines;
}

}  // namespace memseal::report
