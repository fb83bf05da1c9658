// Small text helpers shared by memseal's reports.
#include "report/format.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace memseal::report {

std::string bytesText(std::int64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(std::llabs(bytes));
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[64];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%s%lld B", bytes < 0 ? "-" : "", std::llabs(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%s%.1f %s", bytes < 0 ? "-" : "", value, kUnits[unit]);
  }
  return text;
}

std::string hexAddress(std::uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%lx", static_cast<unsigned long>(address));
  return text;
}

std::string baseName(const std::string& path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string wrap(const std::string& text, std::size_t width, const std::string& indent) {
  std::istringstream words(text);
  std::string word;
  std::string out;
  std::size_t column = 0;
  while (words >> word) {
    if (column > 0 && column + 1 + word.size() > width) {
      out += "\n" + indent;
      column = 0;
    } else if (column > 0) {
      out += " ";
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out;
}

}  // namespace memseal::report
