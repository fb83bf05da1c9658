// Loads a case for `memseal check`, `explain` or `fit`: a shared library built against the same
// libtorch as memseal, exporting (extern "C"):
//   void step(int)                            check, explain: one iteration of the loop
//   void sized_step(std::int64_t size, int)   fit: one iteration at a batch size / length
//   void setup()                              optional, run once first
//   void memseal_roles(memseal::RoleTensors*) optional, explain: names the model's and optimizer's
//                                             tensors (memseal/torch_roles.h fills it)
#pragma once

#include <cstdint>
#include <string>

namespace memseal {
struct RoleTensors;
}

namespace memseal::cli {

struct LoadedCase {
  void (*setup)() = nullptr;
  void (*step)(int) = nullptr;
  void (*sized_step)(std::int64_t, int) = nullptr;
  void (*roles)(RoleTensors*) = nullptr;
  void* handle = nullptr;  // kept open for the process's lifetime: its tensors may outlive the run
};

enum class CaseEntry { kStep, kSizedStep };

// False with a message naming the file and what is wrong (missing, not a shared library, built
// against another libtorch, not exporting the entry point `needed`).
bool loadCase(const std::string& path, LoadedCase* loaded, std::string* error,
              CaseEntry needed = CaseEntry::kStep);

// The directory of the libtorch memseal itself runs with.
std::string runningTorchLibraryDir();

}  // namespace memseal::cli
