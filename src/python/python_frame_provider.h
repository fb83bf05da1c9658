// The Python frames of allocations (track/python_frames.h), read the way PyTorch's own
// CapturedTraceback reads them for its memory snapshots (torch/csrc/profiler/python/
// combined_traceback.cpp): with the GIL held, the calling thread's frames as (code object, last
// instruction) pairs, symbolized only for a report. memseal keeps its own fixed-size copy instead
// of a CapturedTraceback because it interns whole stacks on the hot path (one table lookup, no
// allocation once a stack was seen) and CapturedTraceback's frames are private.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace memseal::python {

// Installs the provider (on) or removes it (off). While installed, every captured stack also names
// its Python stack.
void enablePythonFrames(bool on);
// Reads the frames of every Python stack captured so far, for reports made once the interpreter
// has begun to finalise (which can name only stacks read before). Call it while the program's code
// ends (from atexit).
void readEveryStack();
// Python frames in files under these path prefixes are memseal's, torch's, the standard library's
// or the test runner's, not the user's: (prefix, the name the report folds them under).
void setInternalPaths(std::vector<std::pair<std::string, std::string>> prefixes);

}  // namespace memseal::python
