// memseal::check: a loop run for a fixed number of steps under a LeakDetector, in one call.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "memseal/leak_detector.h"

namespace memseal {

LeakReport check(const std::function<void(int)>& step_fn, DetectorOptions options) {
  if (options.steps <= options.warmup + 3) {
    throw std::invalid_argument("memseal: check() needs more than warmup + 3 steps (warmup " +
                                std::to_string(options.warmup) + ", steps " +
                                std::to_string(options.steps) + ") to tell growth from noise");
  }
  std::uint32_t steps = options.steps;
  LeakDetector detector(std::move(options));
  for (std::uint32_t i = 0; i < steps; ++i) {
    step_fn(static_cast<int>(i));
    detector.step();
  }
  return detector.finish();
}

}  // namespace memseal
