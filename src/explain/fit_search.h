// Measuring a sized step, and what verification does with it: measure the predicted size and, when
// the prediction misses, search the largest size that fits by measuring (bisection between the
// largest size measured to fit and the smallest measured not to).
#pragma once

#include <cstdint>
#include <functional>

#include "memseal/fit.h"

namespace memseal::explain {

class SizedStepRunner {
 public:
  // `device` -1 measures host memory; N, the reserved bytes of cuda:N.
  SizedStepRunner(const std::function<void(std::int64_t, int)>& step, std::uint32_t warmup_steps,
                  int device = -1)
      : step_(step), warmup_steps_(warmup_steps), device_(device) {}
  // Warm-up steps at `size`, then one measured: the step's peak of live tracked CPU bytes and its
  // phases' peaks; on a device, the most the caching allocator reserved in the step, its cache
  // emptied before the size's warm-up (no phases). Exceptions from the step propagate.
  FitPoint measure(std::int64_t size);

 private:
  void warmUp(std::int64_t size);  // the warm-up steps at `size`, then the measured step's number
  FitPoint measureDevice(std::int64_t size);

  const std::function<void(std::int64_t, int)>& step_;
  std::uint32_t warmup_steps_;
  int device_ = -1;
  int step_index_ = 0;
};

// Measures report.predicted_max_size against the prediction and, where it misses by more than the
// tolerance, goes over the budget or fails, searches with at most `max_sizes` more measurements.
FitReport::Verification verifyPrediction(SizedStepRunner& runner, const FitReport& report,
                                         std::uint32_t max_sizes);

}  // namespace memseal::explain
