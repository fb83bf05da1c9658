#include "inject/op_callback.h"

#include <ATen/record_function.h>

#include <atomic>

#include "track/op_observer.h"

namespace memseal::inject {

namespace {

std::atomic<OpListener*> g_listener{nullptr};
thread_local int t_op_depth = 0;
std::atomic<std::uint64_t> g_next_thread{1};
thread_local std::uint64_t t_thread = 0;  // numbered on first use (threadNumber)

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn) {
  bool outermost = t_op_depth++ == 0;
  if (OpListener* listener = g_listener.load(std::memory_order_acquire)) {
    listener->onOp(fn.name(), outermost);
  }
  return nullptr;
}

// An op that started before the callback was installed ends without having started here: the
// depth stays at 0 rather than going below it (which would hide every later outermost op).
void onOpEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (t_op_depth > 0) --t_op_depth;
}

}  // namespace

std::uint64_t threadNumber() {
  if (t_thread == 0) t_thread = g_next_thread.fetch_add(1);
  return t_thread;
}

std::uint64_t numberOfThisThreadIfAny() { return t_thread; }

OpCallback::OpCallback(OpListener& listener) {
  g_listener.store(&listener, std::memory_order_release);
}

OpCallback::~OpCallback() {
  g_listener.store(nullptr, std::memory_order_release);
  setInstalled(false);
}

void OpCallback::setInstalled(bool installed) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (installed && handle_ == 0) {
    // Outermost ops only need their names: no inputs, no outputs.
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&onOpStart, &onOpEnd)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::TORCHSCRIPT_FUNCTION,
                     at::RecordScope::USER_SCOPE}));
    track::noteRecordFunctionCallback(track::kLoopFinderCallback, true);
  } else if (!installed && handle_ != 0) {
    // An op already running keeps its own copy of the callbacks: its end still comes.
    at::removeCallback(handle_);
    handle_ = 0;
    track::noteRecordFunctionCallback(track::kLoopFinderCallback, false);
  }
}

}  // namespace memseal::inject
