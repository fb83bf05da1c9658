// Text helpers every layer may use (sizes, addresses, file names); nothing here knows memseal's
// data types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memseal::common {

// "1.5 KiB", "12 B", "3.2 MiB"
std::string bytesText(std::int64_t bytes);
std::string hexAddress(std::uintptr_t address);
// The last component of a path: "libtorch_cpu.so" for "/x/lib/libtorch_cpu.so".
std::string baseName(const std::string& path);
// "[2, 3, 224, 224]"
std::string shapeText(const std::vector<std::int64_t>& shape);

}  // namespace memseal::common

namespace memseal::common {

// Writes `content` beside `path` and renames it there, so a failed write never leaves half a file
// (nor replaces a good one). False with `error` set ("cannot write PATH: reason") on failure.
bool writeFileAtomically(const std::string& path, const std::string& content, std::string* error);

}  // namespace memseal::common
