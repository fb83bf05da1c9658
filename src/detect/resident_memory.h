// The process's resident set, read once per step boundary from /proc/self/statm through a file
// descriptor kept open (one pread, no open or close per step).
#pragma once

#include <cstdint>

namespace memseal::detect {

class ResidentMemoryReader {
 public:
  ResidentMemoryReader();
  ~ResidentMemoryReader();
  ResidentMemoryReader(const ResidentMemoryReader&) = delete;
  ResidentMemoryReader& operator=(const ResidentMemoryReader&) = delete;

  // Bytes resident now; 0 where /proc is not available.
  std::int64_t read() const;

 private:
  int fd_ = -1;
  std::int64_t page_size_ = 4096;
};

// AddressSanitizer keeps freed memory in quarantine, so resident memory grows every step of any
// loop: there, resident growth says nothing about leaks and is not used.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kResidentMemoryMeaningful = false;
#else
constexpr bool kResidentMemoryMeaningful = true;
#endif

}  // namespace memseal::detect
