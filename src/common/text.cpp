// Formatting with snprintf into stack buffers: these run while reports are made, never on the hot
// path, but they must not depend on stream state.
#include "common/text.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <unistd.h>

namespace memseal::common {

std::string unsignedBytesText(std::uint64_t bytes) {
  return bytesText(static_cast<std::int64_t>(
      std::min<std::uint64_t>(bytes, std::numeric_limits<std::int64_t>::max())));
}

std::string fixedText(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string bytesText(std::int64_t bytes) {
  return bytesTextFromDouble(static_cast<double>(bytes));
}

std::string bytesTextFromDouble(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = std::fabs(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char text[64];
  const char* sign = bytes < 0 ? "-" : "";
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%s%.0f B", sign, value);
  } else {
    std::snprintf(text, sizeof(text), "%s%.1f %s", sign, value, kUnits[unit]);
  }
  return text;
}

std::string hexAddress(std::uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%lx", static_cast<unsigned long>(address));
  return text;
}

std::string normalPath(const std::string& path) {
  if (path.empty()) return path;
  std::string normal = std::filesystem::path(path).lexically_normal().string();
  // "dir/" for "dir/sub/..": a file's path never ends in a slash.
  if (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

std::string shownPath(const std::string& path) {
  std::string normal = normalPath(path);
  if (normal.empty() || normal.front() != '/') return normal;
  char buffer[4096];
  if (::getcwd(buffer, sizeof(buffer)) == nullptr) return normal;
  std::string here = normalPath(buffer);
  if (here == "/") return normal;  // relative to the root reads worse than absolute
  if (normal.size() > here.size() + 1 && normal.compare(0, here.size(), here) == 0 &&
      normal[here.size()] == '/') {
    return normal.substr(here.size() + 1);
  }
  return normal;
}

std::string baseName(const std::string& path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
  return shapeText(shape.data(), shape.size());
}

std::string shapeText(const std::int64_t* shape, std::size_t rank) {
  std::string text = "[";
  for (std::size_t i = 0; i < rank; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace memseal::common

namespace memseal::common {

bool writeFileAtomically(const std::string& path, const std::string& content, std::string* error) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      if (error != nullptr) *error = "cannot write " + temporary + ": " + std::strerror(errno);
      std::remove(temporary.c_str());
      return false;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    if (error != nullptr) *error = "cannot write " + path + ": " + std::strerror(errno);
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

}  // namespace memseal::common
