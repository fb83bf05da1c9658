// Time windows as steps, ended on the runtime's own thread: of a fixed length (--interval:
// IntervalSteps), or sized to the run (runSizedWindow) where OpLoopSteps finds no loop. A window
// in which the program allocated and freed nothing says nothing about what it keeps: it is no step,
// and the next one begins. A program waiting on I/O, or starved of the CPU by a busy machine, would
// otherwise fill its run with empty steps, and growth that comes from every active step would look
// as if it came from a few.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "inject/step_source.h"

namespace memseal::inject {

// Allocations and frees the program has made so far, CPU and CUDA.
std::int64_t memoryActivity();

// When a window ends and whether it was a step. Its clock and the program's activity are given to
// it, so it is tested alone. Any thread may move the next end (endNextAt); check() and next() are
// the runtime thread's.
class TimeWindows {
 public:
  using Clock = std::chrono::steady_clock;

  // `length`: each window's; zero: sized to the run since `started`.
  TimeWindows(std::chrono::nanoseconds length, Clock::time_point started)
      : length_(length), started_(started) {}

  void endNextAt(Clock::time_point end) { next_end_.store(end); }
  std::chrono::nanoseconds untilEnd(Clock::time_point now) const;

  enum class Window { kRunning, kEmpty, kStep };
  // At `now`, with the program's memoryActivity(): whether the window is still running, ended
  // empty (the next one has begun), or ended as a step: the caller takes it, then calls next().
  Window check(Clock::time_point now, std::int64_t activity);
  // The next window begins at `now`.
  void next(Clock::time_point now);

 private:
  std::chrono::nanoseconds length_;
  Clock::time_point started_;
  std::atomic<Clock::time_point> next_end_{Clock::time_point{}};
  // memoryActivity() when the last window ended.
  std::atomic<std::int64_t> activity_{-1};
};

// --interval DURATION: every window of that length in which the program used memory is a step.
// With a length of zero, windows sized to the run (runSizedWindow): a forked child's steps.
class IntervalSteps final : public StepSource {
 public:
  using Clock = std::chrono::steady_clock;

  IntervalSteps(std::chrono::nanoseconds length, StepLedger& ledger);

  std::vector<report::StepsTaken> stepsTaken() override;
  std::vector<std::pair<std::string, double>> iterationsPerStep() override { return {}; }
  std::chrono::nanoseconds untilNextTick() const override;
  void tick() override;

 private:
  std::chrono::nanoseconds length_;
  StepLedger& ledger_;
  TimeWindows windows_;
  std::atomic<std::uint64_t> steps_{0};
};

}  // namespace memseal::inject
