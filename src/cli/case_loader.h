// Loads a `memseal check` case: a shared library exporting `extern "C" void step(int)` and
// optionally `extern "C" void setup()`, built against the same libtorch as memseal.
#pragma once

#include <string>

namespace memseal::cli {

struct LoadedCase {
  void (*setup)() = nullptr;
  void (*step)(int) = nullptr;
  void* handle = nullptr;  // kept open for the process's lifetime: its tensors may outlive the run
};

// False with a message naming the file and what is wrong (missing, not a shared library, built
// against another libtorch, no `step`).
bool loadCase(const std::string& path, LoadedCase* loaded, std::string* error);

// The directory of the libtorch memseal itself runs with.
std::string runningTorchLibraryDir();

}  // namespace memseal::cli
