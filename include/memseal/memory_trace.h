// The allocation trace for PyTorch's memory viewer (torch.cuda._memory_viz,
// pytorch.org/memory_viz).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memseal/export.h"

namespace memseal {

// Records every tracked allocation and free (of whichever Tracker, LeakDetector or scope runs)
// between start() and stop(), keeping the newest `max_events`, and writes them as the pickle
// torch.cuda.memory._snapshot() returns, which torch.cuda._memory_viz and its web viewer read.
// Where the CUDA caching allocator's events reach memseal, the newest `max_events` of them are kept
// as well, and each CUDA device is in the pickle with its segments and its trace (device_traces[N]
// is cuda:N; the CPU comes after the highest CUDA ordinal).
class MEMSEAL_API MemoryTrace {
 public:
  // PyTorch's viewer opens device traces up to about 100,000 entries (its own default history
  // length); an allocation and its free take five (segment_alloc, alloc, free_requested,
  // free_completed, segment_free), so the default keeps the newest 40,000 events.
  explicit MemoryTrace(std::size_t max_events = 40000);
  ~MemoryTrace();
  MemoryTrace(const MemoryTrace&) = delete;
  MemoryTrace& operator=(const MemoryTrace&) = delete;

  // Throws std::logic_error when another trace runs, std::runtime_error when the ring cannot be
  // had. The ring is touched at once (max_events x ~100 bytes), so it is resident before whatever
  // measures the process's memory starts.
  void start();
  // Stops recording and takes the allocations live now (of the newest tracking session).
  void stop();

  std::uint64_t allocations() const;  // recorded (after stop)
  std::uint64_t frees() const;
  std::uint64_t dropped() const;   // older events the rings (CPU and CUDA) could not keep
  std::int64_t liveBytes() const;  // in the live allocations taken at stop
  std::size_t liveCount() const;

  // The pickle's bytes; stops first if still running.
  std::string memoryVizPickle();
  // Writes it beside `path` and renames; throws std::runtime_error naming the path on failure.
  void writeMemoryViz(const std::string& path);

 private:
  struct Data;
  std::size_t max_events_;
  bool running_ = false;
  Data* data_ = nullptr;
};

}  // namespace memseal
