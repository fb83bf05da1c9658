// What a step costs in the leak detector, and so how close together steps may come: signals (an
// op loop's iterations, a program's own steps) closer than kStepCostMultiple times the average
// cost are one step, never closer than kMinStepGap and always taken kMaxStepGap apart
// (step_tuning.h). Kept by the run's StepLedger, under its lock.
#pragma once

#include <algorithm>
#include <chrono>

#include "inject/step_tuning.h"
#include "inject/time_scale.h"

namespace memseal::inject {

class StepCost {
 public:
  using Clock = std::chrono::steady_clock;

  // One step's cost; the average moves a fifth of the way towards it (a verdict's renewal, one
  // step in a few, costs most).
  void add(Clock::duration cost) {
    average_ = average_ == Clock::duration::zero() ? cost : (4 * average_ + cost) / 5;
    min_gap_ =
        std::clamp<Clock::duration>(kStepCostMultiple * average_, scaledByTimeScale(kMinStepGap),
                                    scaledByTimeScale(kMaxStepGap));
  }
  // Signals closer together than this after a step are one step with it (zero before any step).
  Clock::duration minGap() const { return min_gap_; }

 private:
  Clock::duration average_{};
  Clock::duration min_gap_{};
};

}  // namespace memseal::inject
