// Counted steps, for a loop the op-loop finder follows (OpLoopSteps): once the loop's last
// kEqualIterationsToCount iterations each made the same number of CPU allocations, the op callback
// is removed (it makes libtorch run its per-op machinery on every op of the program) and the
// allocator hook ends the steps by counting allocations (track/counted_steps.h). Each step checks
// that it begins where the first did, and every kCountedStepsBetweenChecks steps the callback
// comes back until two calls of the anchor fall on iteration boundaries. A check that fails (the
// iterations no longer allocate alike, or the anchor no longer runs: the loop ended), or a loop
// thread quiet for kQuietLoop, stops counting, and the ops are followed again.
//
// Everything here runs on the loop's thread, but stopWhenQuiet (on the runtime's thread), which
// touches only what is atomic, and what the Host does under its own locks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "memseal/leak_detector.h"

namespace memseal::inject {

class CountedLoopSteps {
 public:
  using Clock = std::chrono::steady_clock;

  // What counting needs of the step source that follows the loop.
  class Host {
   public:
    // The step that ends `iterations` of the loop's iterations, while the loop is still followed;
    // whether it was taken.
    virtual bool takeCountedStep(Clock::time_point now, std::uint64_t iterations) = 0;
    // After a step taken, outside every lock.
    virtual void afterCountedStep() = 0;
    // Whether the loop is still followed (else counting takes no more steps).
    virtual bool followingLoop() const = 0;
    // The op-loop finder's: whether the loop's recent iterations all matched and its decision is
    // settled; the loop judged afresh once its ops are followed again.
    virtual bool loopSettled() = 0;
    virtual void judgeLoopAfresh() = 0;
    virtual void setOpCallbackInstalled(bool installed) = 0;
    // Signals closer together than this after a step are one step (StepCost).
    virtual Clock::duration minStepGap() = 0;
    // The detector's op watching from now on.
    virtual void watchOps(OpWatching watching) = 0;

   protected:
    ~Host() = default;
  };

  explicit CountedLoopSteps(Host& host) : host_(host) {}

  bool counting() const { return counting_.load(std::memory_order_relaxed); }
  // At the anchor, with the op callback on: whether counting may start now.
  bool countIterationAllocations(Clock::time_point now);
  void start(Clock::time_point now);
  // At the anchor while counting (the callback is on only during a check).
  void checkAnchor();
  // On the runtime's thread: the loop's thread made no allocation for a while (it waits, or a
  // next phase makes none on the CPU): the ops are followed again, so that a loop ending there is
  // seen.
  void stopWhenQuiet();
  // No more counting: another source ends the steps (the caller stops the rest).
  void stopForGood() { counting_.store(false, std::memory_order_release); }
  // The allocator hook's handler (track::CountedStepHandler): ends a counted step and returns the
  // allocations until the next one (0: counting stopped).
  std::uint64_t onBoundary();

  // While steps are counted (whole iterations each), the detector watches ops automatically (one
  // step in a few, the others replayed) instead of on every step, and again on every step when
  // counting stops. For a runtime whose user did not choose which steps' ops are watched.
  void watchOpsAutomaticallyWhileCounting() { ops_follow_counting_.store(true); }
  bool opsFollowCounting() const { return ops_follow_counting_.load(); }

  // For the report's notes: counted steps taken, and the allocations an iteration made (the last
  // counting's).
  std::uint64_t stepsCounted() const { return counted_steps_.load(std::memory_order_relaxed); }
  std::uint64_t allocationsPerIteration() const {
    return counted_allocations_.load(std::memory_order_relaxed);
  }

 private:
  void stop(const char* why);
  // After counting stopped (either way): the loop judged afresh, ops watched on every step.
  void followOpsAgain(const char* why);
  void takeStep(Clock::time_point now);
  // Notes a counted step taken (or counting begun) at `now`, for the quiet stop.
  void markStep(Clock::time_point now);
  std::uint64_t iterationsPerStep(Clock::duration iteration);

  Host& host_;
  // Iterations alike in allocations, at the anchor before counting starts.
  struct IterationAllocations {
    bool seen = false;
    std::uint64_t last_serial = 0;    // the thread's allocation serial at the anchor's last call
    Clock::time_point last_anchor{};  // ... and when
    std::uint64_t allocations = 0;    // of the iterations in the current run of equal ones
    std::uint32_t equal = 0;          // iterations in that run
    Clock::time_point run_started{};  // when its first iteration began
  };
  IterationAllocations iteration_;
  std::atomic<bool> counting_{false};
  std::atomic<bool> ops_follow_counting_{false};
  std::uint64_t allocations_per_iteration_ = 0;
  std::uint64_t iterations_per_step_ = 1;
  std::uint64_t count_base_ = 0;  // an allocation serial at which an iteration began
  // Where the first counted step began (whereThisThreadIs), for each set of RecordFunction
  // callbacks (memseal's own, and whether there are any).
  std::uint64_t iteration_start_[8] = {};
  // track::recordFunctionCallbacks() when the last counted boundary was done with.
  std::uint64_t callbacks_seen_ = 0;
  Clock::time_point next_place_check_{};
  Clock::duration place_cost_{};  // of whereThisThreadIs, a moving average
  // When the last counted step was taken, and how far apart they come (read by the runtime's
  // thread too).
  std::atomic<Clock::rep> last_step_at_{0};
  std::atomic<Clock::duration> step_interval_{Clock::duration::zero()};
  Clock::duration iteration_time_{};
  // A check against the anchor: in progress, counted steps since the last one, boundaries while
  // it waits for the anchor, and anchors it saw.
  bool checking_ = false;
  std::uint32_t steps_since_check_ = 0;
  std::uint32_t boundaries_while_checking_ = 0;
  std::uint32_t checked_anchors_ = 0;
  std::atomic<std::uint64_t> counted_steps_{0};
  std::atomic<std::uint64_t> counted_allocations_{0};
};

}  // namespace memseal::inject
