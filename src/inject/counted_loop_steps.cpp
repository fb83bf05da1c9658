#include "inject/counted_loop_steps.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "inject/step_tuning.h"
#include "inject/time_scale.h"
#include "track/counted_steps.h"
#include "track/op_observer.h"
#include "track/op_sampling.h"
#include "track/thread_state.h"

namespace memseal::inject {

bool CountedLoopSteps::countIterationAllocations(Clock::time_point now) {
  std::uint64_t serial = track::threadState().allocation_serial;
  IterationAllocations& iteration = iteration_;
  if (!iteration.seen) {
    iteration = IterationAllocations{true, serial, now, 0, 0, now};
    return false;
  }
  std::uint64_t made = serial - iteration.last_serial;
  if (made == 0 || made != iteration.allocations) {
    iteration.allocations = made;
    iteration.equal = made == 0 ? 0 : 1;
    iteration.run_started = iteration.last_anchor;
  } else {
    ++iteration.equal;
  }
  iteration.last_serial = serial;
  iteration.last_anchor = now;
  if (iteration.equal < kEqualIterationsToCount) return false;
  // Only a loop whose recent iterations all matched its ops, judged again and settled.
  return host_.loopSettled();
}

std::uint64_t CountedLoopSteps::iterationsPerStep(Clock::duration iteration) {
  Clock::duration gap = host_.minStepGap();
  if (iteration <= Clock::duration::zero()) return 1;
  // As coalescing does, steps no closer than a multiple of what a step costs, and twice that gap:
  // once the loop is known, the detector's own cost is most of what memseal adds to it, and whole
  // iterations per step keep every step alike.
  Clock::duration wanted = kCountedStepGapFactor * gap;
  auto iterations =
      static_cast<std::uint64_t>((wanted + iteration - Clock::duration(1)) / iteration);
  return std::clamp<std::uint64_t>(iterations, 1, kMaxIterationsPerStep);
}

void CountedLoopSteps::start(Clock::time_point now) {
  const IterationAllocations& iteration = iteration_;
  allocations_per_iteration_ = iteration.allocations;
  count_base_ = iteration.last_serial;
  iteration_time_ = (now - iteration.run_started) / iteration.equal;
  iterations_per_step_ = iterationsPerStep(iteration_time_);
  markStep(now);
  checking_ = false;
  steps_since_check_ = 0;
  std::fill(std::begin(iteration_start_), std::end(iteration_start_), 0);
  next_place_check_ = now;
  counted_allocations_.store(allocations_per_iteration_, std::memory_order_relaxed);
  counting_.store(true, std::memory_order_release);
  if (ops_follow_counting_.load()) {
    track::setReplayIterationLength(allocations_per_iteration_);
    host_.watchOps(OpWatching::automatic());
  }
  // Called as the anchor starts an iteration, before its first allocation: the step ends at the
  // first allocation after this iteration and the next iterations_per_step_ - 1, as it would end at
  // the anchor's start if ops were followed.
  track::countStepsOnThisThread(allocations_per_iteration_ * iterations_per_step_ + 1);
  host_.setOpCallbackInstalled(false);
  callbacks_seen_ = track::recordFunctionCallbacks();
  trace("counting steps: " + std::to_string(allocations_per_iteration_) +
        " allocations an iteration, " + std::to_string(iterations_per_step_) +
        " iterations a step");
}

void CountedLoopSteps::stop(const char* why) {
  counting_.store(false, std::memory_order_release);
  checking_ = false;
  iteration_ = IterationAllocations{};
  track::countStepsOnThisThread(0);
  host_.setOpCallbackInstalled(true);
  followOpsAgain(why);
}

void CountedLoopSteps::stopWhenQuiet() {
  if (!counting_.load(std::memory_order_acquire)) return;
  Clock::time_point last{Clock::duration(last_step_at_.load(std::memory_order_relaxed))};
  Clock::duration step = step_interval_.load(std::memory_order_relaxed);
  Clock::duration quiet =
      std::max<Clock::duration>(scaledByTimeScale(kQuietLoop), kQuietSteps * step);
  if (Clock::now() - last < quiet) return;
  // The loop's thread, if it allocates again, finds counting stopped at its next boundary; its
  // stale iteration count starts afresh at the next anchor.
  counting_.store(false, std::memory_order_release);
  host_.setOpCallbackInstalled(true);
  followOpsAgain("the loop's thread made no allocation for a while");
}

void CountedLoopSteps::followOpsAgain(const char* why) {
  if (ops_follow_counting_.load()) {
    track::setReplayIterationLength(0);
    host_.watchOps(OpWatching::everyStep());
  }
  // The loop is judged afresh from its next anchor: the ops seen before counting are stale.
  host_.judgeLoopAfresh();
  trace(std::string("counting stopped: ") + why);
}

void CountedLoopSteps::checkAnchor() {
  if (!checking_) return;  // the callback is going; ops already started still end here
  std::uint64_t serial = track::threadState().allocation_serial;
  if ((serial - count_base_) % allocations_per_iteration_ != 0) {
    stop("the anchor no longer starts an iteration where the count does");
    return;
  }
  if (++checked_anchors_ < kAnchorsPerCheck) return;
  checking_ = false;
  steps_since_check_ = 0;
  host_.setOpCallbackInstalled(false);
}

void CountedLoopSteps::markStep(Clock::time_point now) {
  last_step_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  step_interval_.store(iteration_time_ * iterations_per_step_, std::memory_order_relaxed);
}

void CountedLoopSteps::takeStep(Clock::time_point now) {
  if (!host_.takeCountedStep(now, iterations_per_step_)) return;
  counted_steps_.fetch_add(1, std::memory_order_relaxed);
  host_.afterCountedStep();
}

std::uint64_t CountedLoopSteps::onBoundary() {
  if (!host_.followingLoop() || !counting_.load(std::memory_order_relaxed)) return 0;
  if (checking_ && ++boundaries_while_checking_ > kBoundariesWithoutAnchor) {
    stop("the anchor no longer runs");
    return 0;
  }
  // An iteration begins with the same allocation, made in the same place, each time: elsewhere,
  // the loop has ended (a validation pass after training) and its ops are followed again. Native
  // stacks pass through libtorch's dispatcher, whose path depends on the RecordFunction callbacks
  // installed when each op started (track::recordFunctionCallbacks): one place for each set of
  // callbacks, and none to compare where a callback came or went since the last boundary (the ops
  // this allocation is in may have started on either side of the change: a callback removed at an
  // anchor's start). Unwinding costs a few microseconds, as much as a short step: it is looked at
  // no more often than kPlaceCostMultiple times what it costs.
  Clock::time_point now = Clock::now();
  std::uint64_t callbacks = track::recordFunctionCallbacks();
  if (callbacks == callbacks_seen_ && now >= next_place_check_) {
    std::uint64_t where = track::whereThisThreadIs();
    Clock::time_point done = Clock::now();
    place_cost_ = (3 * place_cost_ + (done - now)) / 4;
    next_place_check_ = done + kPlaceCostMultiple * place_cost_;
    // Which of memseal's callbacks, and whether any callback (another library's) is installed.
    std::uint64_t installed = callbacks & track::kCallbacksInstalled;
    std::uint64_t& start = iteration_start_[installed << 1 | (at::hasGlobalCallbacks() ? 1 : 0)];
    if (start == 0) {
      start = where;
    } else if (where != start) {
      trace("iteration began at " + std::to_string(where) + ", not " + std::to_string(start));
      stop("the iteration no longer starts where it did");
      return 0;
    }
    now = done;
  }
  Clock::time_point last{Clock::duration(last_step_at_.load(std::memory_order_relaxed))};
  Clock::duration iteration = (now - last) / iterations_per_step_;
  iteration_time_ = (3 * iteration_time_ + iteration) / 4;
  markStep(now);
  takeStep(now);
  if (!counting_.load(std::memory_order_relaxed)) return 0;
  if (!checking_ && ++steps_since_check_ >= kCountedStepsBetweenChecks) {
    checking_ = true;
    boundaries_while_checking_ = 0;
    checked_anchors_ = 0;
    // Steps of another length from here on, if the loop's pace changed by far.
    std::uint64_t iterations = iterationsPerStep(iteration_time_);
    if (iterations > 2 * iterations_per_step_ || 2 * iterations < iterations_per_step_) {
      iterations_per_step_ = iterations;
    }
    host_.setOpCallbackInstalled(true);
  }
  callbacks_seen_ = track::recordFunctionCallbacks();
  return allocations_per_iteration_ * iterations_per_step_;
}

}  // namespace memseal::inject
