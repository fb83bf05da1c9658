// The process's resident set, read once per step boundary from /proc/self/statm through a file
// descriptor kept open (one pread, no open or close per step), and what of it malloc holds free.
#pragma once

#include <cstdint>
#include <string>

namespace memseal::detect {

class ResidentMemoryReader {
 public:
  ResidentMemoryReader();
  ~ResidentMemoryReader();
  ResidentMemoryReader(const ResidentMemoryReader&) = delete;
  ResidentMemoryReader& operator=(const ResidentMemoryReader&) = delete;

  // Bytes resident now; 0 where /proc is not available.
  std::int64_t read() const;

  // Bytes malloc holds free for reuse in its arenas (glibc's mallinfo2: fordblks, every arena's
  // free chunks and their tops); 0 where the C library has no mallinfo2 (before glibc 2.33, musl).
  // Memory a program freed stays resident there: with tensors of ever-new sizes it grows until the
  // heap's holes fit what comes, and drops when malloc trims its top. Not memory in use, so not a
  // leak: the resident memory the detector judges leaves it out. What it returns moves only when
  // the free bytes moved by kFreeBytesStep or more since it last did. Readings `after_warmup` are
  // kept for heldFreeNote.
  std::int64_t mallocFreeBytes(bool after_warmup);
  static constexpr std::int64_t kFreeBytesStep = 256 << 10;

  // When malloc came to hold kHeldFreeNoteBytes more free since warm-up: a note for the report
  // that says so and what returns it (the process's memory grew by it, without a leak to find).
  // Empty otherwise.
  std::string heldFreeNote() const;
  static constexpr std::int64_t kHeldFreeNoteBytes = std::int64_t{64} << 20;

 private:
  int fd_ = -1;
  std::int64_t page_size_ = 4096;
  // glibc's mallinfo2, looked up at run time: a direct call would tie the library to glibc 2.33.
  void* malloc_statistics_ = nullptr;
  std::int64_t free_counted_ = 0;        // what mallocFreeBytes last returned
  std::int64_t free_after_warmup_ = -1;  // the first reading after warm-up; -1 before it
  std::int64_t free_last_ = 0;
};

// AddressSanitizer keeps freed memory in quarantine, so resident memory grows every step of any
// loop: there, resident growth says nothing about leaks and is not used.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kResidentMemoryMeaningful = false;
#else
constexpr bool kResidentMemoryMeaningful = true;
#endif

}  // namespace memseal::detect
