// MEMSEAL_RUN_TIME_SCALE=N (an integer, 1 to 1000): `memseal run`'s clock-based limits (the step
// gaps, how long learning may take, when a loop is quiet, the pause between boundary reports) are N
// times longer. For memseal's developers, who count instructions under valgrind: a program there
// runs some 300 times slower (the example server's 50 us requests take 15 ms), and with the limits
// unscaled its steps come one per iteration instead of the native run's two or more, so the count
// would measure a configuration no native run takes (bench/run_instruction_counts.sh). Not a user
// option: the launcher does not set it. Internal to src/inject/.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace memseal::inject {

inline std::int64_t timeScale() {
  static const std::int64_t scale = [] {
    const char* value = std::getenv("MEMSEAL_RUN_TIME_SCALE");
    if (value == nullptr) return std::int64_t{1};
    char* end = nullptr;
    long parsed = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || parsed < 1 || parsed > 1000) return std::int64_t{1};
    return static_cast<std::int64_t>(parsed);
  }();
  return scale;
}

template <class Duration>
Duration scaledByTimeScale(Duration duration) {
  return duration * timeScale();
}

}  // namespace memseal::inject
