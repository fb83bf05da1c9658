// statm's second field is the resident set in pages. Reading it again from offset 0 of the same
// descriptor gives fresh values: procfs regenerates the text on every read.
#include "detect/resident_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace memseal::detect {

ResidentMemoryReader::ResidentMemoryReader() {
  fd_ = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) page_size_ = page;
}

ResidentMemoryReader::~ResidentMemoryReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::int64_t ResidentMemoryReader::read() const {
  if (fd_ < 0) return 0;
  char text[128];
  ssize_t length = ::pread(fd_, text, sizeof(text) - 1, 0);
  if (length <= 0) return 0;
  text[length] = '\0';
  char* end = nullptr;
  std::strtoll(text, &end, 10);  // total program size
  long long resident = std::strtoll(end, nullptr, 10);
  return static_cast<std::int64_t>(resident) * page_size_;
}

}  // namespace memseal::detect
