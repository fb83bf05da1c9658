// statm's second field is the resident set in pages; smaps_rollup sums the process's mappings, a
// line a field, in kB. Reading either again from offset 0 of the same descriptor gives fresh
// values: procfs regenerates the text on every read.
#include "detect/resident_memory.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "detect/boundary_schedule.h"

namespace memseal::detect {

namespace {

// glibc's struct mallinfo2 (malloc.h since 2.33), field for field: declared here so the library
// builds and loads where the C library predates it.
struct MallocStatistics {
  std::size_t arena;     // bytes of the arenas (sbrk'd and mmapped heaps)
  std::size_t ordblks;   // free chunks
  std::size_t smblks;    // free fastbin chunks
  std::size_t hblks;     // chunks mmapped apart
  std::size_t hblkhd;    // their bytes
  std::size_t usmblks;   // unused
  std::size_t fsmblks;   // bytes in free fastbin chunks
  std::size_t uordblks;  // bytes in use
  std::size_t fordblks;  // bytes free (fastbins, bins and the tops)
  std::size_t keepcost;  // the main arena's top
};
using MallocStatisticsFunction = MallocStatistics (*)();

// Private_Clean + Private_Dirty of smaps_rollup's `text`, in bytes.
std::int64_t privateBytesOf(const char* text) {
  long long total_kib = 0;
  for (const char* line = text; line != nullptr && *line != '\0';) {
    long long kib = 0;
    if (std::sscanf(line, "Private_Clean: %lld kB", &kib) == 1 ||
        std::sscanf(line, "Private_Dirty: %lld kB", &kib) == 1) {
      total_kib += kib;
    }
    line = std::strchr(line, '\n');
    if (line != nullptr) ++line;
  }
  return static_cast<std::int64_t>(total_kib) * 1024;
}

}  // namespace

ResidentMemoryReader::ResidentMemoryReader(Measure measure) : measure_(measure) {
  fd_ = ::open(measure == Measure::kResidentSet ? "/proc/self/statm" : "/proc/self/smaps_rollup",
               O_RDONLY | O_CLOEXEC);
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) page_size_ = page;
  malloc_statistics_ = dlsym(RTLD_DEFAULT, "mallinfo2");
}

ResidentMemoryReader::~ResidentMemoryReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::int64_t ResidentMemoryReader::read() const {
  if (fd_ < 0) return 0;
  if (measure_ == Measure::kPrivatePages) {
    char rollup[2048];  // about 1 KiB of fields
    ssize_t length = ::pread(fd_, rollup, sizeof(rollup) - 1, 0);
    if (length <= 0) return 0;
    rollup[length] = '\0';
    return privateBytesOf(rollup);
  }
  char text[128];
  ssize_t length = ::pread(fd_, text, sizeof(text) - 1, 0);
  if (length <= 0) return 0;
  text[length] = '\0';
  char* end = nullptr;
  std::strtoll(text, &end, 10);  // total program size
  long long resident = std::strtoll(end, nullptr, 10);
  return static_cast<std::int64_t>(resident) * page_size_;
}

std::int64_t ResidentMemoryReader::mallocFreeBytes(bool after_warmup) {
  if (malloc_statistics_ == nullptr) return 0;
  std::int64_t start_ns = steadyNowNs();
  if (!mallocStatisticsCallDue(start_ns, last_call_end_ns_, last_call_cost_ns_,
                               call_cost_before_ns_)) {
    return free_counted_;
  }
  auto statistics = reinterpret_cast<MallocStatisticsFunction>(malloc_statistics_)();
  call_cost_before_ns_ = last_call_cost_ns_;
  last_call_end_ns_ = steadyNowNs();
  last_call_cost_ns_ = last_call_end_ns_ - start_ns;
  auto free_bytes = static_cast<std::int64_t>(statistics.fordblks);
  if (after_warmup) {
    if (free_after_warmup_ < 0) free_after_warmup_ = free_bytes;
    free_last_ = free_bytes;
  }
  // What a boundary finds free moves by kilobytes with whatever the step last freed; taken as is,
  // that churn made most readings of a flat loop rise or fall, and one large rise late in a short
  // run passed for steady growth. The resident set itself moves by whole pages, seldom.
  if (std::abs(free_bytes - free_counted_) >= kFreeBytesStep) free_counted_ = free_bytes;
  return free_counted_;
}

bool mallocStatisticsCallDue(std::int64_t now_ns, std::int64_t last_end_ns,
                             std::int64_t last_cost_ns, std::int64_t cost_before_ns) {
  // Deferred only after two costly calls in a row: the first call in a process is cold, and one
  // walk may be slow once (the process was descheduled, or had just freed much and merged it).
  std::int64_t cost_ns = std::min(last_cost_ns, cost_before_ns);
  if (cost_ns <= ResidentMemoryReader::kCheapCallNs) return true;
  return now_ns - last_end_ns >= ResidentMemoryReader::kTimePerCallCost * cost_ns;
}

std::optional<MallocFreeMemory> ResidentMemoryReader::mallocFree(bool kept_graphs_cost) const {
  if (heldFreeGrowth() < kHeldFreeNoteBytes) return std::nullopt;
  return MallocFreeMemory{free_after_warmup_, free_last_, kept_graphs_cost};
}

}  // namespace memseal::detect
