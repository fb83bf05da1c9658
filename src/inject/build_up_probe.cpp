#include "inject/build_up_probe.h"

namespace memseal::inject {

bool BuildUpProbe::reportNow(std::int64_t live_bytes, Clock::time_point now) {
  bool rose = last_live_bytes_ >= 0 && live_bytes > last_live_bytes_;
  last_live_bytes_ = live_bytes;
  rising_steps_ = rose ? rising_steps_ + 1 : 0;
  if (rising_steps_ != kFirstReportAfter && rising_steps_ != kSecondReportAfter) return false;
  if (reported_ && now - last_report_ < shortest_gap_) return false;
  reported_ = true;
  last_report_ = now;
  return true;
}

}  // namespace memseal::inject
