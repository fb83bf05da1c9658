// Small text helpers shared by memseal's reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memseal/tracker.h"

namespace memseal::report {

// "1.5 KiB", "12 B", "3.2 MiB"
std::string bytesText(std::int64_t bytes);
std::string hexAddress(std::uintptr_t address);
std::string baseName(const std::string& path);
// Wraps at `width` columns; continuation lines start with `indent`.
std::string wrap(const std::string& text, std::size_t width, const std::string& indent);

// A stack for people: the user's frames first, runs of internal frames (libtorch, the C++ runtime,
// memseal) folded into one line each; empty when no frame is the user's.
std::vector<std::string> stackLines(const std::vector<StackFrame>& frames);
// "[32, 64] Float  requires_grad=true  grad_fn=ReluBackward0"
std::string tensorText(const TensorInfo& tensor);

}  // namespace memseal::report
