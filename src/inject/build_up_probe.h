// When `memseal run` takes a report before the pause between reports is over: at a build-up in
// progress. Reports come 100 ms or more apart (a twentieth of the program's time at most), and a
// phase that keeps tensors for a few dozen steps and frees them at its end (an evaluation pass
// keeping its outputs with their graphs, an epoch gathering its predictions) can begin and end
// between two of them: the verdict at exit still finds what it kept, from the step samples, but
// the holder search (run_holders.h) needs it still held. Tracked tensor memory that rose at every
// step end of the last few is such a build-up, or a loop's warm-up: both are rare enough that an
// early report at each costs little, and each rise gets two (the first may come too soon for a
// verdict), no closer together than the probe's shortest gap. Such a report serves the search
// only: taken mid-build-up, it is no verdict to fall back on at exit.
#pragma once

#include <chrono>
#include <cstdint>

namespace memseal::inject {

class BuildUpProbe {
 public:
  using Clock = std::chrono::steady_clock;
  // Rising step ends before the rise's first and second early reports.
  static constexpr int kFirstReportAfter = 6;
  static constexpr int kSecondReportAfter = 16;

  explicit BuildUpProbe(Clock::duration shortest_gap) : shortest_gap_(shortest_gap) {}

  // Whether the step that ended at `now`, with `live_bytes` of tracked tensor memory, is to be
  // followed by a report at once. Called once per step end, in order.
  bool reportNow(std::int64_t live_bytes, Clock::time_point now);

 private:
  Clock::duration shortest_gap_;
  std::int64_t last_live_bytes_ = -1;
  int rising_steps_ = 0;
  bool reported_ = false;  // an early report was taken
  Clock::time_point last_report_{};
};

}  // namespace memseal::inject
