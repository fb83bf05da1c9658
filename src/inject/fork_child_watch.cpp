#include "inject/fork_child_watch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "detect/forked_child_verdict.h"
#include "inject/step_tuning.h"
#include "track/memory_counters.h"

namespace memseal::inject {

std::int64_t privateMemoryBytes() {
  std::FILE* file = std::fopen("/proc/self/smaps_rollup", "re");
  if (file == nullptr) return 0;
  char line[256];
  long long total_kib = 0;
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "Private_Clean: %lld kB", &kib) == 1 ||
        std::sscanf(line, "Private_Dirty: %lld kB", &kib) == 1) {
      total_kib += kib;
    }
  }
  std::fclose(file);
  return total_kib * 1024;
}

ForkChildWatch::ForkChildWatch(pid_t parent)
    : parent_(parent), next_window_(Clock::now() + kShortestWindow) {}

std::chrono::nanoseconds ForkChildWatch::untilNextWindow() const {
  return std::max<std::chrono::nanoseconds>(next_window_ - Clock::now(),
                                            std::chrono::nanoseconds(0));
}

void ForkChildWatch::window() {
  tensor_bytes_.push_back(track::cpuCounters().read("cpu").live_bytes);
  private_bytes_.push_back(privateMemoryBytes());
  Clock::time_point now = Clock::now();
  next_window_ = now + runSizedWindow(now - started_);
}

LeakReport ForkChildWatch::report() const {
  return detect::forkedChildReport(parent_, tensor_bytes_, private_bytes_);
}

}  // namespace memseal::inject
