// Python's GIL, taken where the process runs Python, for memseal run. A report names Python frames,
// which needs the GIL; so does the leak detector's step when it writes down a finding. Locks are
// taken in one order: the GIL, then a step source's own lock, then the run's step lock (StepLedger;
// a thread that ends a step on a Python-level record_function already holds the GIL).
#pragma once

#include <dlfcn.h>

#include <atomic>

namespace memseal::inject {

// False in a forked child of a Python program until Python has remade its GIL and thread states
// there: it does so after fork() returns, in the thread that forked, before its after-fork hooks
// run. A thread that took the GIL before then would find its thread state gone as it let the GIL
// go, and Python would abort the child. The runtime hears from such a hook
// (run_python_frames.cpp); until then no PythonLock is taken, and reports go without Python lines.
inline std::atomic<bool> g_python_ready_after_fork{true};

// Whether this process runs Python.
inline bool pythonInitialized() {
  static auto is_initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  return is_initialized != nullptr && is_initialized() != 0;
}

class PythonLock {
 public:
  // Where the caller runs: any thread (the runtime's own, for reports and time windows), or only a
  // thread that has run Python (an op's thread: one of libtorch's intra-op workers must not wait
  // for the GIL, whose holder may be waiting for it to finish).
  enum class Threads { kAny, kPythonOnly };

  explicit PythonLock(Threads threads = Threads::kAny) {
    using IntCall = int (*)();
    static auto is_initialized = reinterpret_cast<IntCall>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    static auto ensure = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
    static auto release =
        reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
    static auto this_thread_state =
        reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"));
    if (is_initialized == nullptr || ensure == nullptr || release == nullptr ||
        is_initialized() == 0 || finalizing() ||
        !g_python_ready_after_fork.load(std::memory_order_acquire)) {
      return;
    }
    if (threads == Threads::kPythonOnly &&
        (this_thread_state == nullptr || this_thread_state() == nullptr)) {
      return;
    }
    release_ = release;
    state_ = ensure();
  }
  ~PythonLock() {
    // Python ends a thread that wants the GIL back once it has begun to finalise (this thread let
    // the GIL go while it ran Python, at the switch interval): the thread unwinds through here with
    // its thread state deleted, and releasing that would abort the process.
    if (release_ != nullptr && !finalizing()) release_(state_);
  }
  // Whether the GIL was taken (not where Python is not running, or is finalising).
  bool held() const { return release_ != nullptr; }
  PythonLock(const PythonLock&) = delete;
  PythonLock& operator=(const PythonLock&) = delete;

 private:
  // Whether Python is finalising: Py_IsFinalizing from Python 3.13 on, _Py_IsFinalizing before.
  static bool finalizing() {
    using IntCall = int (*)();
    static auto is_finalizing = [] {
      auto call = reinterpret_cast<IntCall>(dlsym(RTLD_DEFAULT, "Py_IsFinalizing"));
      return call != nullptr ? call
                             : reinterpret_cast<IntCall>(dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"));
    }();
    return is_finalizing != nullptr && is_finalizing() != 0;
  }

  void (*release_)(int) = nullptr;
  int state_ = 0;
};

}  // namespace memseal::inject
