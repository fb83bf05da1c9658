// The report of a child that `memseal run --follow-fork` sees forked but not exec'd (DataLoader
// workers, multiprocessing pools). Such a child starts as a copy of its parent: the parent's
// tensors, its tracker state and the pages of every Python object are shared until written. Its
// memory is watched per time window: tracked tensor memory, and private memory (pages no longer
// shared). Private memory that keeps growing while tensor memory does not is copy-on-write: the
// child writes pages it shares with its parent, as Python does on every read of an object (its
// reference count), which copies a dataset held as Python lists into every worker. This records
// the windows; detect/forked_child_verdict.h judges them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::inject {

// Private memory of this process (Private_Clean + Private_Dirty of /proc/self/smaps_rollup), in
// bytes; 0 where it cannot be read.
std::int64_t privateMemoryBytes();

class ForkChildWatch {
 public:
  explicit ForkChildWatch(pid_t parent);
  std::chrono::nanoseconds untilNextWindow() const;
  // Ends a window: takes its sample.
  void window();
  LeakReport report() const;

 private:
  using Clock = std::chrono::steady_clock;
  pid_t parent_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point next_window_;
  std::vector<std::int64_t> tensor_bytes_;
  std::vector<std::int64_t> private_bytes_;
};

}  // namespace memseal::inject
