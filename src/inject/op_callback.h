// The outermost ops of every thread, for the step sources that end steps at ops (OpLoopSteps,
// NamedSteps): one global at::RecordFunction callback, which libtorch runs for ATen ops,
// TorchScript functions and named regions (RECORD_USER_SCOPE, torch.profiler's record_function),
// giving each one's name and whether it is outermost on its thread. Only outermost ops say where a
// program is: nested ones vary between iterations in Python (the order of profiler bookkeeping
// ops). One listener at a time; installed and removed while the program runs (counted steps need
// no ops, and without a callback libtorch skips its per-op machinery).
#pragma once

#include <cstdint>
#include <mutex>

namespace memseal::inject {

class OpListener {
 public:
  // On the thread that runs the op, at its start.
  virtual void onOp(const char* name, bool outermost) = 0;

 protected:
  ~OpListener() = default;
};

class OpCallback {
 public:
  // `listener` hears every op while the callback is installed, until this is destroyed.
  explicit OpCallback(OpListener& listener);
  ~OpCallback();
  OpCallback(const OpCallback&) = delete;
  OpCallback& operator=(const OpCallback&) = delete;

  void setInstalled(bool installed);

 private:
  std::mutex mutex_;          // guards handle_ (installed and removed on the loop's thread)
  std::uint64_t handle_ = 0;  // the RecordFunction callback's handle, 0: none
};

// The calling thread's number, from 1, given on its first call.
std::uint64_t threadNumber();
// The calling thread's number if threadNumber() gave it one, else 0.
std::uint64_t numberOfThisThreadIfAny();

}  // namespace memseal::inject
