// libmemseal_preload.so: what `memseal run` puts in LD_PRELOAD. It is loaded into every process the
// program starts, including ones that never use libtorch (a shell, a compiler), so it links
// nothing but libc and does nothing until libtorch is in the process: then it loads the runtime
// (libmemseal_run.so, which links libtorch and memseal's core) and starts it. libtorch arrives in
// one of two ways:
//   - linked to the program: loaded and initialised before main(), so the check runs in a
//     __libc_start_main wrapper, once every library's constructors have run;
//   - loaded later by dlopen (Python's `import torch`, plugins): the check runs after each dlopen
//     returns, when the new libraries' constructors have run.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "inject/run_protocol.h"

namespace {

using DlopenFunction = void* (*)(const char*, int);
using MainFunction = int (*)(int, char**, char**);
using StartMainFunction = int (*)(MainFunction, int, char**, void (*)(), void (*)(), void (*)(),
                                  void*);

std::atomic<bool> g_activated{false};
std::atomic<bool> g_checking{false};
MainFunction g_program_main = nullptr;

DlopenFunction realDlopen() {
  static DlopenFunction real = reinterpret_cast<DlopenFunction>(dlsym(RTLD_NEXT, "dlopen"));
  return real;
}

// A rank of a distributed job: torchrun starts each with RANK and WORLD_SIZE set. A process the
// rank starts inherits them, but also the rank's pid its runtime set (kEnvRankPid): not a rank
// itself.
bool distributedRank() {
  if (std::getenv("RANK") == nullptr || std::getenv("WORLD_SIZE") == nullptr) return false;
  const char* rank_pid = std::getenv(memseal::inject::kEnvRankPid);
  return rank_pid == nullptr || std::strtol(rank_pid, nullptr, 10) == static_cast<long>(getpid());
}

// Whether this process is one memseal run traces: the program itself, each rank of a distributed
// job it launches, or any process when children are followed.
bool traced() {
  const char* root = std::getenv(memseal::inject::kEnvRootPid);
  const char* follow = std::getenv(memseal::inject::kEnvFollowFork);
  if (root == nullptr || std::getenv(memseal::inject::kEnvRuntime) == nullptr) return false;
  if (follow != nullptr && std::strcmp(follow, "1") == 0) return true;
  return std::strtol(root, nullptr, 10) == static_cast<long>(getpid()) || distributedRank();
}

bool libtorchLoaded(DlopenFunction open) {
  // RTLD_NOLOAD finds a library already in the process by its soname and loads nothing.
  void* handle = open("libc10.so", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

void activateIfLibtorchLoaded() {
  if (g_activated.load(std::memory_order_acquire)) return;
  DlopenFunction open = realDlopen();
  if (open == nullptr || !libtorchLoaded(open)) return;
  // Loading the runtime calls dlopen again (and its constructors may): only the outer call acts.
  if (g_checking.exchange(true)) return;
  if (!g_activated.load(std::memory_order_acquire) && traced()) {
    g_activated.store(true, std::memory_order_release);
    const char* path = std::getenv(memseal::inject::kEnvRuntime);
    void* runtime = open(path, RTLD_NOW | RTLD_LOCAL);
    auto activate = runtime == nullptr
                        ? nullptr
                        : reinterpret_cast<int (*)()>(dlsym(runtime, "memseal_run_activate"));
    if (activate == nullptr) {
      std::fprintf(stderr, "memseal run: cannot load %s: %s\n", path, dlerror());
    } else {
      activate();
    }
  }
  g_checking.store(false);
}

int mainAfterLibrariesStarted(int argc, char** argv, char** envp) {
  if (traced()) activateIfLibtorchLoaded();
  return g_program_main(argc, argv, envp);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  DlopenFunction open = realDlopen();
  if (open == nullptr) return nullptr;
  void* handle = open(file, mode);
  if (handle != nullptr && !g_activated.load(std::memory_order_acquire) && traced()) {
    activateIfLibtorchLoaded();
  }
  return handle;
}

__attribute__((visibility("default"))) int __libc_start_main(MainFunction main_function, int argc,
                                                             char** argv, void (*init)(),
                                                             void (*fini)(), void (*rtld_fini)(),
                                                             void* stack_end) {
  auto real = reinterpret_cast<StartMainFunction>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_program_main = main_function;
  return real(&mainAfterLibrariesStarted, argc, argv, init, fini, rtld_fini, stack_end);
}

}  // extern "C"
