#include "inject/run_python_plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "inject/python_lock.h"
#include "inject/run_protocol.h"
#include "track/collected_frees.h"
#include "track/python_frames.h"

namespace memseal::inject {

namespace {

using WatchSteps = int (*)(StepSignalHandler);
WatchSteps g_watch_steps = nullptr;  // the plugin's memseal_run_python_watch_steps
using FindHolders = char* (*)(const char*);
FindHolders g_find_holders = nullptr;  // the plugin's memseal_run_python_find_holders

void setPythonFrameProvider(const track::PythonFrameProvider* provider) {
  track::setPythonFrameProvider(provider);
}

void onCollection(bool running) { track::setCollectionRunning(running); }

}  // namespace

bool startPythonFrames(void (*at_python_exit)(), void (*after_fork_in_child)()) {
  using IsInitialized = int (*)();
  auto is_initialized = reinterpret_cast<IsInitialized>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  if (is_initialized == nullptr || is_initialized() == 0) return false;
  std::string runtime = std::getenv(kEnvRuntime) == nullptr ? "" : std::getenv(kEnvRuntime);
  std::string plugin = runtime.substr(0, runtime.rfind('/') + 1) + "libmemseal_run_python.so";
  void* handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    std::cerr << "memseal run: Python frames are not available (" << (why ? why : plugin)
              << "); stacks show native frames only\n";
    return false;
  }
  using Start =
      int (*)(void (*)(const track::PythonFrameProvider*), void (*)(), void (*)(), void (*)(bool));
  auto start = reinterpret_cast<Start>(dlsym(handle, "memseal_run_python_start"));
  if (start == nullptr ||
      start(&setPythonFrameProvider, at_python_exit, after_fork_in_child, &onCollection) != 0) {
    std::cerr << "memseal run: Python frames are not available for this Python (memseal was built "
                 "for another version); stacks show native frames only\n";
    return false;
  }
  g_watch_steps = reinterpret_cast<WatchSteps>(dlsym(handle, "memseal_run_python_watch_steps"));
  g_find_holders = reinterpret_cast<FindHolders>(dlsym(handle, "memseal_run_python_find_holders"));
  return true;
}

int watchPythonSteps(StepSignalHandler handler) {
  if (g_watch_steps == nullptr) return -1;
  PythonLock python;
  if (!python.held()) return 0;
  return g_watch_steps(handler);
}

std::optional<std::string> findPythonHolders(const std::string& request) {
  if (g_find_holders == nullptr) return std::nullopt;
  PythonLock python;
  if (!python.held()) return std::nullopt;
  char* found = g_find_holders(request.c_str());
  if (found == nullptr) return std::nullopt;
  std::string holders = found;
  std::free(found);
  return holders;
}

}  // namespace memseal::inject
