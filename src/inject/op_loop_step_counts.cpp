#include "inject/op_loop_step_counts.h"

#include <algorithm>

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

report::OpLoopStepsTaken OpLoopStepCounts::stepsTaken(const FoundLoops& found) const {
  report::OpLoopStepsTaken taken;
  taken.steps = taken_;
  taken.outside_loops = outside_loops_;
  taken.handed_over = handed_over_;
  taken.ops_seen = found.ops_seen;
  taken.windows_because = found.windows_because;
  taken.ops_when_windows_began = found.ops_when_windows_began;
  taken.in_windows = found.in_windows;
  taken.first_window = kShortestWindow;
  taken.windows_per_run = kWindowsPerRun;
  taken.counted_steps = found.counted_steps;
  taken.allocations_per_iteration = found.allocations_per_iteration;
  taken.counted_steps_between_checks = kCountedStepsBetweenChecks;
  if (found.loops == nullptr) return taken;
  for (std::size_t i = 0; i < found.loops->size(); ++i) {
    const OpLoopFinder::Loop& loop = (*found.loops)[i];
    report::OpLoopStepsTaken::Loop reported;
    reported.name = loop.name;
    reported.anchor_op = i < found.anchor_names.size() ? found.anchor_names[i] : "?";
    reported.period = loop.period;
    reported.found_after = loop.found_after;
    reported.steps = knows(i) ? loop_steps_[i] : 0;
    reported.runs = loop.runs;
    reported.iterations = knows(i) ? loop_iterations_[i] : 0;
    taken.loops.push_back(std::move(reported));
  }
  return taken;
}

}  // namespace memseal::inject
