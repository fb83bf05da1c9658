#include "inject/op_loop_step_counts.h"

#include <algorithm>

#include "common/text.h"
#include "inject/step_tuning.h"

namespace memseal::inject {

void OpLoopStepCounts::loopsFound(std::size_t loops) {
  loop_steps_.resize(loops, 0);
  loop_iterations_.resize(loops, 0);
}

void OpLoopStepCounts::stepTaken(std::optional<std::size_t> loop) {
  ++taken_;
  seen_.store(taken_, std::memory_order_relaxed);
  if (loop && knows(*loop)) {
    ++loop_steps_[*loop];
  } else {
    ++outside_loops_;
  }
}

void OpLoopStepCounts::iterated(std::size_t loop, std::uint64_t iterations) {
  if (knows(loop)) loop_iterations_[loop] += iterations;
}

void OpLoopStepCounts::moveOutOfLoop(std::size_t loop, std::uint64_t steps_back) {
  std::uint64_t moved = knows(loop) ? std::min(loop_steps_[loop], steps_back) : 0;
  if (moved > 0) loop_steps_[loop] -= moved;
  outside_loops_ += moved;
}

std::vector<std::pair<std::string, double>> OpLoopStepCounts::iterationsPerStep(
    const std::vector<OpLoopFinder::Loop>& loops) const {
  std::vector<std::pair<std::string, double>> ratios;
  for (std::size_t i = 0; i < loops.size() && i < loop_steps_.size(); ++i) {
    if (loop_steps_[i] == 0 || loop_iterations_[i] <= loop_steps_[i]) continue;
    ratios.emplace_back(loops[i].name, static_cast<double>(loop_iterations_[i]) /
                                           static_cast<double>(loop_steps_[i]));
  }
  return ratios;
}

std::vector<std::string> OpLoopStepCounts::description(const FoundLoops& found) const {
  static const std::vector<OpLoopFinder::Loop> kNoLoops;
  const std::vector<OpLoopFinder::Loop>& loops = found.loops != nullptr ? *found.loops : kNoLoops;
  std::string steps = " (" + common::countedText(taken_, "step") + ")";
  // The program's own signals took over: what was guessed before them, if anything, is history.
  if (handed_over_ && taken_ == 0) return {};
  if (handed_over_) {
    return {common::countedText(taken_, "step") + " before the program's own steps began, from " +
            (loops.empty() ? std::string("time windows") : "loops found in its ops")};
  }
  if (loops.empty()) {
    if (found.in_windows) return {found.windows + steps};
    return {"the program ended before its loop was found (" + std::to_string(found.ops_seen) +
            " outermost ops seen: too few iterations, or ops that never repeat); --interval "
            "DURATION or --step-on NAME sets the steps" +
            steps};
  }
  std::vector<std::string> lines;
  std::string summary = common::countedText(taken_, "step") + " in " +
                        std::to_string(loops.size()) + (loops.size() == 1 ? " loop" : " loops") +
                        " found in the program's ops";
  if (outside_loops_ > 0) {
    summary += ", and " + std::to_string(outside_loops_) +
               " outside them (start-up, between loops" +
               (found.windows.empty() ? std::string(")") : ", time windows)");
  }
  lines.push_back(summary);
  for (std::size_t i = 0; i < loops.size(); ++i) {
    const OpLoopFinder::Loop& loop = loops[i];
    std::uint64_t loop_steps = knows(i) ? loop_steps_[i] : 0;
    std::uint64_t iterations = knows(i) ? loop_iterations_[i] : 0;
    std::string together =
        iterations > loop_steps
            ? " (" + std::to_string(iterations) +
                  " iterations: those closer together than a step costs were one step)"
            : "";
    std::string anchor = i < found.anchor_names.size() ? found.anchor_names[i] : "?";
    lines.push_back(loop.name + ": one step per call of " + anchor +
                    ", the op that starts each of its iterations (" + std::to_string(loop.period) +
                    " ops, found after " + std::to_string(loop.found_after) +
                    " ops): " + common::countedText(loop_steps, "step") + " in " +
                    common::countedText(loop.runs, "run") + together);
  }
  if (found.counted_steps > 0) {
    lines.push_back(std::to_string(found.counted_steps) +
                    " of these steps were ended by counting the loop's allocations (" +
                    std::to_string(found.allocations_per_iteration) +
                    " an iteration) instead of following every op, checked against the op "
                    "that starts each iteration every " +
                    std::to_string(kCountedStepsBetweenChecks) + " steps");
  }
  if (!found.windows.empty() && found.in_windows) lines.push_back("then " + found.windows);
  return lines;
}

}  // namespace memseal::inject
