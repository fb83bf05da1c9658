// Small text helpers shared by memseal's reports.
#pragma once

#include <cstdint>
#include <string>

namespace memseal::report {

// "1.5 KiB", "12 B", "3.2 MiB"
std::string bytesText(std::int64_t bytes);
std::string hexAddress(std::uintptr_t address);
std::string baseName(const std::string& path);
// Wraps at `width` columns; continuation lines start with `indent`.
std::string wrap(const std::string& text, std::size_t width, const std::string& indent);

}  // namespace memseal::report
