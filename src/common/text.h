// Text helpers every layer may use (sizes, addresses, file names); nothing here knows memseal's
// data types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memseal::common {

// "1.5 KiB", "12 B", "3.2 MiB"
std::string bytesText(std::int64_t bytes);
// The same for a byte count that need not be whole (a rate per step); finite values only.
std::string bytesTextFromDouble(double bytes);
// The same for an unsigned count (counters of a device), capped at the largest int64.
std::string unsignedBytesText(std::uint64_t bytes);
// a - b, or 0 when b is larger: numbers from sources that may disagree never wrap around.
inline std::uint64_t minusOrZero(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }
// `value` with `decimals` digits after the point ("2.5").
std::string fixedText(double value, int decimals);
std::string hexAddress(std::uintptr_t address);
// The last component of a path: "libtorch_cpu.so" for "/x/lib/libtorch_cpu.so".
std::string baseName(const std::string& path);
// "/src/app/build/../main.cpp" -> "/src/app/main.cpp": the path without "." and ".." components
// and doubled slashes, worked out on the text alone (links are not followed, so the file need not
// exist on this machine).
std::string normalPath(const std::string& path);
// A source path as a report shows it: relative to the working directory when it lies under it
// ("examples/train.cpp") and that is not the root, else normalPath(path).
std::string shownPath(const std::string& path);
// An op's name as a finding says what made a tensor: a profiler range named "Scope#Name"
// (PyTorch names optimizer.step "Optimizer.step#Adam.step") by its own name, "Adam.step".
std::string shownOpName(const std::string& op);
// "1 step", "3 steps", "0 steps": a count and its noun, with an "s" unless the count is one.
std::string countedText(std::uint64_t count, const std::string& noun);
// "a, b, c": the parts with `separator` between them ("" for none).
std::string joinedText(const std::vector<std::string>& parts, const char* separator);
// "[2, 3, 224, 224]"
std::string shapeText(const std::vector<std::int64_t>& shape);
std::string shapeText(const std::int64_t* shape, std::size_t rank);

}  // namespace memseal::common

namespace memseal::common {

// Writes `content` beside `path` and renames it there, so a failed write never leaves half a file
// (nor replaces a good one). False with `error` set ("cannot write PATH: reason") on failure.
bool writeFileAtomically(const std::string& path, const std::string& content, std::string* error);

// "16GiB", "512 MiB", "1.5G", "4096", "64KB": bytes (K/M/G/T and KiB/MiB/GiB/TiB are powers of
// 1024, kB/MB/GB/TB powers of 1000). nullopt when not understood, not positive or too large.
std::optional<std::int64_t> parseByteSize(const std::string& text);
// "250ms", "2s", "1.5s", "1m": nanoseconds, from 1 ms to 24 h; nullopt otherwise.
std::optional<std::int64_t> parseDurationNs(const std::string& text);
// A CUDA device's name as torch writes it: "cuda" -> 0, "cuda:N" (up to four digits) -> N;
// nullopt for anything else.
std::optional<int> parseCudaDeviceName(const std::string& name);

}  // namespace memseal::common
