// Turns return addresses into function, file:line and library. Runs only when a report is made,
// never while tracing.
#pragma once

#include <cstdint>
#include <vector>

#include "memseal/tracker.h"

namespace memseal::analyze {

// Innermost first. Frames in libtorch, the C++ runtime and memseal are marked is_internal. File and
// line come from `addr2line` for frames outside those libraries, where debug info exists.
std::vector<StackFrame> symbolizeStack(const std::uintptr_t* addresses, int depth);

}  // namespace memseal::analyze
