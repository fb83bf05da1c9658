#include "report/finding_cause.h"

namespace memseal::report {

std::string causeSite(const std::vector<StackFrame>& frames) {
  for (const StackFrame& frame : frames) {
    if (frame.is_internal || frame.file.empty()) continue;
    return frame.file + ":" + std::to_string(frame.line);
  }
  return "";
}

}  // namespace memseal::report
