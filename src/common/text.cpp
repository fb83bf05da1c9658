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
#include <optional>

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

std::string shownOpName(const std::string& op) {
  std::size_t hash = op.rfind('#');
  return hash == std::string::npos || hash + 1 == op.size() ? op : op.substr(hash + 1);
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

std::string countedText(std::uint64_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

std::string joinedText(const std::vector<std::string>& parts, const char* separator) {
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? separator : "") + parts[i];
  return text;
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
    // A full disk (or a file-size limit) shows here, as a failed write or a failed close: the
    // file in place stays as it was, and the half-written temporary goes.
    out.close();
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

std::optional<std::int64_t> parseByteSize(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (text.find('x') != std::string::npos || text.find('X') != std::string::npos) {
    return std::nullopt;  // strtod reads hexadecimal; sizes are decimal
  }
  double value = std::strtod(begin, &end);
  if (end == begin || errno != 0 || !(value > 0)) return std::nullopt;
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  double scale = 0;
  static const struct {
    const char* names[4];
    double scale;
  } kUnits[] = {
      {{"", "B", "b", nullptr}, 1.0},
      {{"K", "KiB", "k", "Ki"}, 1024.0},
      {{"M", "MiB", "m", "Mi"}, 1024.0 * 1024},
      {{"G", "GiB", "g", "Gi"}, 1024.0 * 1024 * 1024},
      {{"T", "TiB", "t", "Ti"}, 1024.0 * 1024 * 1024 * 1024},
      {{"kB", "KB", nullptr, nullptr}, 1e3},
      {{"MB", nullptr, nullptr, nullptr}, 1e6},
      {{"GB", nullptr, nullptr, nullptr}, 1e9},
      {{"TB", nullptr, nullptr, nullptr}, 1e12},
  };
  for (const auto& candidate : kUnits) {
    for (const char* name : candidate.names) {
      if (name != nullptr && unit == name) scale = candidate.scale;
    }
  }
  if (scale == 0) return std::nullopt;
  double bytes = value * scale;
  if (bytes >= 9.2e18 || bytes < 1) return std::nullopt;
  return static_cast<std::int64_t>(bytes);
}

std::optional<int> parseCudaDeviceName(const std::string& name) {
  if (name == "cuda") return 0;
  const std::string prefix = "cuda:";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 4 ||
      name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return std::nullopt;
  }
  return std::stoi(name.substr(prefix.size()));
}

std::optional<std::int64_t> parseDurationNs(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  if (text.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // no hexadecimal
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0 || !(value > 0)) return std::nullopt;
  std::string unit(end);
  double scale = 0;
  if (unit == "ms") scale = 1e6;
  if (unit == "s") scale = 1e9;
  if (unit == "m" || unit == "min") scale = 60e9;
  if (scale == 0 || value * scale < 1e6 || value * scale > 86400e9) return std::nullopt;
  return static_cast<std::int64_t>(value * scale);
}

}  // namespace memseal::common
