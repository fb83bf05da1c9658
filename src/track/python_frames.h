// Python frames behind an allocation. The core knows nothing of Python: the Python module installs
// a provider when it is imported, and from then on every captured stack also names the calling
// thread's Python stack (interned by the provider, which holds the GIL while it reads the frames).
// Symbolized, like native stacks, only when a report is made.
#pragma once

#include <cstdint>
#include <vector>

#include "memseal/tracker.h"

namespace memseal::track {

struct PythonFrameProvider {
  // The interned id of the calling thread's Python stack; 0 when the thread runs no Python code.
  // Called on the hot path with the recursion guard set, only where stacks are captured.
  std::uint32_t (*capture)();
  // Appends the stack's frames, innermost first, with file, line, function and is_internal (frames
  // inside torch, memseal, the standard library and the test runner).
  void (*symbolize)(std::uint32_t python_stack, std::vector<StackFrame>& frames);
  // Whether symbolize() can run on this thread now without waiting for the GIL (the thread holds
  // it, or no interpreter runs): a thread that holds a lock which the GIL's holder waits for must
  // not wait for the GIL.
  bool (*symbolizes_without_waiting)();
};

// Installs `provider` (nullptr removes it). The provider must stay valid for the process.
void setPythonFrameProvider(const PythonFrameProvider* provider);
// Whether a provider is installed: the process runs Python, and its interpreter's native frames
// are not the user's.
bool pythonFramesAvailable();
std::uint32_t capturePythonStack();
void appendPythonFrames(std::uint32_t python_stack, std::vector<StackFrame>& frames);
// Whether a report can name Python frames on this thread now without waiting for the GIL (always,
// without Python).
bool pythonFramesReadableNow();

}  // namespace memseal::track
