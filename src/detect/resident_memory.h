// The process's resident set, read once per step boundary from /proc/self/statm through a file
// descriptor kept open (one pread, no open or close per step), and what of it malloc holds free.
// In a forked child, its private memory instead (/proc/self/smaps_rollup): its resident set counts
// the pages it still shares with its parent, and writing one of them (copy-on-write) makes it
// private without changing the resident set.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "memseal/leak_detector.h"

namespace memseal::detect {

class ResidentMemoryReader {
 public:
  enum class Measure {
    kResidentSet,   // statm's resident pages
    kPrivatePages,  // smaps_rollup's Private_Clean + Private_Dirty: pages no other process maps
  };
  explicit ResidentMemoryReader(Measure measure = Measure::kResidentSet);
  ~ResidentMemoryReader();
  ResidentMemoryReader(const ResidentMemoryReader&) = delete;
  ResidentMemoryReader& operator=(const ResidentMemoryReader&) = delete;

  // Bytes resident (or private) now; 0 where /proc is not available.
  std::int64_t read() const;
  Measure measure() const { return measure_; }

  // Bytes malloc holds free for reuse in its arenas (glibc's mallinfo2: fordblks, every arena's
  // free chunks and their tops); 0 where the C library has no mallinfo2 (before glibc 2.33, musl).
  // Memory a program freed stays resident there: with tensors of ever-new sizes it grows until the
  // heap's holes fit what comes, and drops when malloc trims its top. Not memory in use, so not a
  // leak: the resident memory the detector judges leaves it out. What it returns moves only when
  // the free bytes moved by kFreeBytesStep or more since it last did. Readings `after_warmup` are
  // kept for mallocFree.
  //
  // mallinfo2 walks malloc's free lists under their locks, in time that grows with the free
  // chunks: well under a microsecond in a libtorch loop's heap, 10 us with 1,000 free chunks,
  // 0.3 ms with 10,000, 26 ms with 100,000 (BENCHMARKS.md). While a call costs at most kCheapCallNs
  // it is made on every call of this; once two calls in a row cost more, only when kTimePerCallCost
  // times the cheaper of them has passed since the last returned, the last value returned in
  // between: a fragmented heap's calls take at most about 1/1024 of the time, whatever the resident
  // readings' own schedule.
  std::int64_t mallocFreeBytes(bool after_warmup);
  static constexpr std::int64_t kFreeBytesStep = 256 << 10;
  static constexpr std::int64_t kCheapCallNs = 8000;
  static constexpr std::int64_t kTimePerCallCost = 1024;

  // When malloc came to hold kHeldFreeNoteBytes more free since warm-up: what the report says of it
  // (the process's memory grew by it, without a leak to find); empty otherwise.
  // `kept_graphs_cost`: the report has autograd graphs kept across steps, whose small objects,
  // left between what each step freed, keep malloc from reusing or returning it: the memory is part
  // of what that leak costs (leakyReport charges it to the finding).
  std::optional<MallocFreeMemory> mallocFree(bool kept_graphs_cost) const;
  // How much more malloc holds free than after warm-up, 0 before warm-up.
  std::int64_t heldFreeGrowth() const {
    return free_after_warmup_ < 0 ? 0 : std::max<std::int64_t>(0, free_last_ - free_after_warmup_);
  }
  static constexpr std::int64_t kHeldFreeNoteBytes = std::int64_t{64} << 20;

 private:
  Measure measure_;
  int fd_ = -1;
  std::int64_t page_size_ = 4096;
  // glibc's mallinfo2, looked up at run time: a direct call would tie the library to glibc 2.33.
  void* malloc_statistics_ = nullptr;
  std::int64_t free_counted_ = 0;  // what mallocFreeBytes last returned
  std::int64_t last_call_cost_ns_ = 0;
  std::int64_t call_cost_before_ns_ = 0;  // the call's before the last
  std::int64_t last_call_end_ns_ = 0;
  std::int64_t free_after_warmup_ = -1;  // the first reading after warm-up; -1 before it
  std::int64_t free_last_ = 0;
};

// Whether ResidentMemoryReader::mallocFreeBytes calls mallinfo2 at `now_ns` (steady clock), given
// when its last call returned and what its last two calls cost (0 for none).
bool mallocStatisticsCallDue(std::int64_t now_ns, std::int64_t last_end_ns,
                             std::int64_t last_cost_ns, std::int64_t cost_before_ns);

// AddressSanitizer keeps freed memory in quarantine, so resident memory grows every step of any
// loop: there, resident growth says nothing about leaks and is not used.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kResidentMemoryMeaningful = false;
#else
constexpr bool kResidentMemoryMeaningful = true;
#endif

}  // namespace memseal::detect
