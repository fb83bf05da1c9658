// The steps the op-loop source (op_loop_steps.h) took: in each loop it found and outside them,
// with each loop's iterations (iterations closer together than a step costs are one step), for the
// report's lines of where its steps came from. Under the step ledger's lock, except seen(). Pure:
// tested alone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inject/op_loop_finder.h"
#include "report/steps_taken.h"

namespace memseal::inject {

// What the finder and the counting of steps found, for stepsTaken().
struct FoundLoops {
  const std::vector<OpLoopFinder::Loop>* loops = nullptr;
  std::vector<std::string> anchor_names;  // of each loop: the op that starts its iterations
  std::size_t ops_seen = 0;               // outermost ops seen
  // Why time windows were taken, if they were, and the ops seen on the busiest thread then.
  report::OpLoopStepsTaken::WindowsBecause windows_because =
      report::OpLoopStepsTaken::WindowsBecause::kNotTaken;
  std::size_t ops_when_windows_began = 0;
  bool in_windows = false;          // the steps are time windows now
  std::uint64_t counted_steps = 0;  // ended by counting the loop's allocations
  std::uint64_t allocations_per_iteration = 0;
};

class OpLoopStepCounts {
 public:
  // The finder knows `loops` loops now (a step of loop i is counted once loops > i).
  void loopsFound(std::size_t loops);
  // A step taken, in loop `loop`, or outside loops (none, or a loop the counts do not know yet).
  void stepTaken(std::optional<std::size_t> loop);
  // `iterations` more iterations of `loop`, step or not.
  void iterated(std::size_t loop, std::uint64_t iterations);
  // The newest `steps_back` steps counted in `loop` belonged to a phase found after them (the
  // detector moved them there): they count outside loops.
  void moveOutOfLoop(std::size_t loop, std::uint64_t steps_back);
  // The program's own steps took over.
  void handOver() { handed_over_ = true; }

  std::uint64_t taken() const { return taken_; }
  // taken(), read without the step lock.
  std::uint64_t seen() const { return seen_.load(std::memory_order_relaxed); }
  bool knows(std::size_t loop) const { return loop < loop_steps_.size(); }

  // Iterations per step of each loop whose steps each ended more than one iteration.
  std::vector<std::pair<std::string, double>> iterationsPerStep(
      const std::vector<OpLoopFinder::Loop>& loops) const;
  // Where the steps came from: per loop and outside loops (report::stepsFromLines says it).
  report::OpLoopStepsTaken stepsTaken(const FoundLoops& found) const;

 private:
  std::uint64_t taken_ = 0;
  std::atomic<std::uint64_t> seen_{0};
  std::uint64_t outside_loops_ = 0;
  std::vector<std::uint64_t> loop_steps_;       // steps taken in each loop
  std::vector<std::uint64_t> loop_iterations_;  // iterations of each loop (calls of its anchor)
  bool handed_over_ = false;
};

}  // namespace memseal::inject
