// The steps of a program under `memseal run`, whichever source ends them (step_source.h): the one
// lock a step is taken under, the leak detector's step() and phase(), and how close together steps
// may come (what a step costs in the detector: StepCost). Every source takes its steps here, so a
// Python program whose own steps take over from those guessed from its ops has one lock, one cost
// and one count.
//
// Lock order, the runtime's one: the GIL (PythonLock), a source's own lock, then mutex().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "inject/step_cost.h"
#include "memseal/leak_detector.h"

namespace memseal::inject {

class StepLedger {
 public:
  using Clock = std::chrono::steady_clock;

  // `after_step` runs after each step, on the thread that took it, outside every lock (afterStep).
  StepLedger(LeakDetector& detector, std::function<void()> after_step)
      : detector_(detector), after_step_(std::move(after_step)) {}
  StepLedger(const StepLedger&) = delete;
  StepLedger& operator=(const StepLedger&) = delete;

  // Held while a step is taken; the runtime takes it around fork() and for reports.
  std::mutex& mutex() { return mutex_; }

  // No more steps, from any source: a forked child, whose parent's steps are not its own. Without
  // a lock (in a forked child, any lock may be held by a thread that is not there).
  void stop() { stopped_.store(true, std::memory_order_release); }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

  // Under mutex(): whether a step ending at `now` comes closer to the last one than a step costs
  // (never so for the first).
  bool tooSoonLocked(Clock::time_point now) const {
    return taken_ > 0 && now - last_step_ < cost_.minGap();
  }
  // Under mutex(): ends a step at `now` (when its end was seen), unless the steps have stopped, or
  // `coalesce` and it is too soon (it is one step with the last); whether it was taken.
  bool takeLocked(Clock::time_point now, bool coalesce);
  // Under mutex(): the detector's steps from now on are the phase `name`'s; `steps_back` steps
  // already taken join it (LeakDetector::phase).
  void phaseLocked(const std::string& name, std::uint32_t steps_back = 0) {
    detector_.phase(name, steps_back);
  }
  // Under mutex(): which steps' ops the detector watches from now on.
  void watchOpsLocked(OpWatching watching) { detector_.watchOps(watching); }

  // What a step costs makes the smallest gap between two (StepCost).
  Clock::duration minGap() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cost_.minGap();
  }
  std::uint64_t taken() {
    std::lock_guard<std::mutex> lock(mutex_);
    return taken_;
  }
  // After a step taken, with no lock held (the runtime's boundary report takes the GIL first).
  void afterStep() {
    if (after_step_) after_step_();
  }

 private:
  LeakDetector& detector_;
  std::function<void()> after_step_;
  std::atomic<bool> stopped_{false};
  std::mutex mutex_;
  // Under mutex_.
  std::uint64_t taken_ = 0;
  Clock::time_point last_step_{};
  StepCost cost_;
};

}  // namespace memseal::inject
