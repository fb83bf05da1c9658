// A lock for sections a few dozen instructions long (a live-table shard): one atomic exchange to
// take it and a plain release store to give it back, against the two atomic read-modify-writes of
// an uncontended std::mutex. Waiters yield rather than spin hot, so a holder that was preempted
// gets the core back.
#pragma once

#include <atomic>
#include <thread>

#include "common/branch_hints.h"

namespace memseal::track {

class SpinLock {
 public:
  void lock() {
    if (MEMSEAL_LIKELY(!locked_.exchange(true, std::memory_order_acquire))) return;
    lockSlowly();
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  // Out of line: the wait's code would otherwise sit among the hot path's lines that every
  // allocation and free fetches.
  [[gnu::cold, gnu::noinline]] void lockSlowly() {
    do {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    } while (locked_.exchange(true, std::memory_order_acquire));
  }

  std::atomic<bool> locked_{false};
};

}  // namespace memseal::track
