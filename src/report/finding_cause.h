// What a leak cause is matched by across reports (a job's ranks, two runs of one program): its
// category, its op, and the first line of the program's own code in its stack.
#pragma once

#include <string>
#include <vector>

#include "memseal/tracker.h"

namespace memseal::report {

// The first frame of the program's own code (not libtorch's, the runtime's or memseal's):
// "file:line" with the file as recorded; "" where the stack has none.
std::string causeSite(const std::vector<StackFrame>& frames);

}  // namespace memseal::report
