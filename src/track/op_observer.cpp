// The callbacks run on every watched op, so they do as little as they can: the start pushes a
// frame; the end reads outputs only when the op allocated on this thread or the grad_fn observer
// wants autograd history, and never while the tracker itself is working.
#include "track/op_observer.h"

#include <ATen/core/TensorBase.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "track/cpu_allocator_hook.h"
#include "track/device_tensors.h"
#include "track/grad_fn_observer.h"
#include "track/live_table.h"
#include "track/op_sampling.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/tensor_reference.h"

namespace memseal::track {

namespace {

std::uint64_t g_callback_handle = 0;        // under the session's control lock
std::atomic<std::uint64_t> g_callbacks{0};  // recordFunctionCallbacks()
bool g_needs_outputs = false;
std::atomic<std::uint64_t> g_backward_functions{0};
std::atomic<GradFnObserver*> g_grad_fn_observer{nullptr};
std::atomic<std::int64_t> g_grad_fn_observer_calls{0};
std::atomic<BackwardObserver*> g_backward_observer{nullptr};
std::atomic<std::int64_t> g_backward_observer_calls{0};

constexpr char kEvaluateFunctionPrefix[] = "autograd::engine::evaluate_function: ";

// The engine names the op that evaluates a node "autograd::engine::evaluate_function: <node>" and
// sets the current node around it, so both ends of that op see the node.
void notifyBackwardObserver(ThreadState& state, const at::RecordFunction& fn, bool start) {
  if (g_backward_observer.load(std::memory_order_relaxed) == nullptr) return;
  if (std::strncmp(fn.name(), kEvaluateFunctionPrefix, sizeof(kEvaluateFunctionPrefix) - 1) != 0) {
    return;
  }
  g_backward_observer_calls.fetch_add(1, std::memory_order_seq_cst);
  if (BackwardObserver* observer = g_backward_observer.load(std::memory_order_seq_cst)) {
    TrackerWork work(state);
    try {
      NodeRef node = torch::autograd::get_current_node();
      if (node != nullptr) {
        if (start) {
          observer->onNodeStart(node);
        } else {
          observer->onNodeEnd(node);
        }
      }
    } catch (...) {
      // What the observer reads is best effort; the program's backward must go on.
    }
  }
  g_backward_observer_calls.fetch_sub(1, std::memory_order_seq_cst);
}

// The site of the op now ending, with the stack as the mode asks: intern it while the op's frame is
// still on the stack (onOpEnd has already popped it). Once per op end: a training op's CUDA output
// and its grad_fn would otherwise each capture the same (Python) stack.
std::uint32_t siteOfEndingOp(ThreadState& state) {
  if (state.ending_op_site != 0) return state.ending_op_site;
  ++state.op_depth;
  std::uint32_t site = siteTable().currentSite(state);
  --state.op_depth;
  state.ending_op_site = site;
  return site;
}

// An output of an op that just returned: fills in the signature of storage the op allocated on
// this thread, and tells the grad_fn observer about autograd history when `grad_site` is not 0.
void onOpOutput(ThreadState& state, const at::TensorBase& tensor, const OpFrame& frame,
                std::uint32_t grad_site) {
  if (!tensor.defined()) return;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  std::uint64_t start_serial = frame.start_serial;
  if (state.device_block_serial != frame.device_start_serial && impl->has_storage() &&
      impl->device_type() == c10::DeviceType::CUDA) {
    onDeviceOpOutput(state, tensor, frame.device_start_serial, &siteOfEndingOp);
  } else if (state.allocation_serial != start_serial && impl->has_storage() &&
             impl->device_type() == c10::DeviceType::CPU) {
    const c10::DataPtr& data_ptr = impl->storage().data_ptr();
    if (handedOutByHook(data_ptr)) {
      TensorSignature signature = signatureOf(tensor);
      c10::TensorImpl* displaced = nullptr;
      std::uint32_t slot = state.slot;
      liveAllocations().update(data_ptr.get(), [&](LiveRecord& record) {
        // Only storage this op allocated on this thread: views of older tensors keep theirs.
        if (record.thread_slot != slot || record.thread_serial <= start_serial) return;
        record.signature = signature;
        recordOutputInSequence(state, record, signature);
        if (record.tensor != impl) {
          displaced = record.tensor;
          takeWeakTensorReference(impl);
          record.tensor = impl;
        }
      });
      // Dropped outside the shard lock: the last weak reference may destroy the old TensorImpl.
      if (displaced != nullptr) dropWeakTensorReference(displaced);
    }
  }
  if (grad_site == 0) return;
  const NodeRef& grad_fn = tensor.grad_fn();
  if (grad_fn == nullptr) return;
  // Counted before the observer is loaded, so setGradFnObserver(nullptr) can wait for us.
  g_grad_fn_observer_calls.fetch_add(1, std::memory_order_seq_cst);
  if (GradFnObserver* observer = g_grad_fn_observer.load(std::memory_order_seq_cst)) {
    std::int8_t cuda_device = impl->device_type() == c10::DeviceType::CUDA
                                  ? static_cast<std::int8_t>(impl->device().index())
                                  : -1;
    observer->onGradFn(signatureOf(tensor), cuda_device, grad_fn, grad_site);
  }
  g_grad_fn_observer_calls.fetch_sub(1, std::memory_order_seq_cst);
}

void visitTensors(ThreadState& state, const c10::IValue& value, const OpFrame& frame,
                  std::uint32_t grad_site) {
  if (value.isTensor()) {
    onOpOutput(state, value.toTensor(), frame, grad_site);
  } else if (value.isTensorList()) {
    for (const at::Tensor& element : value.toTensorList()) {
      onOpOutput(state, element, frame, grad_site);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      if (element.isTensor()) onOpOutput(state, element.toTensor(), frame, grad_site);
    }
  }
}

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn) {
  ThreadState& state = threadState();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    g_backward_functions.fetch_add(1, std::memory_order_relaxed);
  }
  if (state.op_depth < kMaxOpDepth) {
    state.ops[state.op_depth] =
        OpFrame{fn.name(), state.allocation_serial, 0, state.device_block_serial};
  }
  ++state.op_depth;
  if (!state.in_tracker) notifyBackwardObserver(state, fn, /*start=*/true);
  return nullptr;
}

void onOpEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState& state = threadState();
  if (state.op_depth == 0) return;  // the op started before the observer was installed
  --state.op_depth;
  if (!state.in_tracker) notifyBackwardObserver(state, fn, /*start=*/false);
  if (state.op_depth >= static_cast<std::uint32_t>(kMaxOpDepth)) return;
  if (state.in_tracker || !sessionActive()) return;
  // A copy: an op dispatched from inside this callback would reuse the slot.
  const OpFrame frame = state.ops[state.op_depth];
  bool allocated_inside = state.allocation_serial != frame.start_serial ||
                          state.device_block_serial != frame.device_start_serial;
  bool watch_grad_fns = g_grad_fn_observer.load(std::memory_order_acquire) != nullptr &&
                        c10::GradMode::is_enabled() &&
                        fn.scope() != at::RecordScope::BACKWARD_FUNCTION;
  if (!allocated_inside && !watch_grad_fns) return;
  if (!fn.needsOutputs()) return;
  TrackerWork work(state);
  state.ending_op_site = 0;
  try {
    std::uint32_t grad_site = 0;
    if (watch_grad_fns) grad_site = siteOfEndingOp(state);
    for (const c10::IValue& output : fn.outputs()) visitTensors(state, output, frame, grad_site);
  } catch (...) {
    // Metadata is best effort: a tensor kind whose storage cannot be read keeps no signature.
  }
}

}  // namespace

void configureOpObserver(bool record_tensor_metadata) { g_needs_outputs = record_tensor_metadata; }

void setOpsWatched(bool watched) {
  if (watched && g_callback_handle == 0) {
    // The scopes a desktop libtorch records, not the mobile builds' (kernel dtype tags, build
    // features, the lite interpreter): libtorch rebuilds a list for each scope a callback asks for
    // whenever a thread's record-function state is set, twice per node of a backward pass.
    auto callback =
        at::RecordFunctionCallback(&onOpStart, &onOpEnd)
            .needsOutputs(g_needs_outputs)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                     at::RecordScope::TORCHSCRIPT_FUNCTION, at::RecordScope::CUSTOM_CLASS,
                     at::RecordScope::USER_SCOPE, at::RecordScope::STATIC_RUNTIME_OP,
                     at::RecordScope::STATIC_RUNTIME_MODEL});
    g_callback_handle = at::addGlobalCallback(callback);
    noteRecordFunctionCallback(kTrackerCallback, true);
  } else if (!watched && g_callback_handle != 0) {
    at::removeCallback(g_callback_handle);
    g_callback_handle = 0;
    noteRecordFunctionCallback(kTrackerCallback, false);
  }
}

std::uint64_t recordFunctionCallbacks() { return g_callbacks.load(std::memory_order_acquire); }

void noteRecordFunctionCallback(std::uint64_t which, bool installed) {
  std::uint64_t current = g_callbacks.load(std::memory_order_relaxed);
  std::uint64_t next;
  do {
    std::uint64_t changes = (current & ~kCallbacksInstalled) + kOneCallbackChange;
    std::uint64_t now_installed = installed ? (current | which) : (current & ~which);
    next = changes | (now_installed & kCallbacksInstalled);
  } while (!g_callbacks.compare_exchange_weak(current, next, std::memory_order_acq_rel,
                                              std::memory_order_relaxed));
}

void setGradFnObserver(GradFnObserver* observer) {
  g_grad_fn_observer.store(observer, std::memory_order_seq_cst);
  if (observer != nullptr) return;
  // A thread that loaded the old observer may still be inside it: wait it out.
  while (g_grad_fn_observer_calls.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

void setBackwardObserver(BackwardObserver* observer) {
  g_backward_observer.store(observer, std::memory_order_seq_cst);
  if (observer != nullptr) return;
  while (g_backward_observer_calls.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

std::uint64_t backwardFunctionsRun() { return g_backward_functions.load(); }

}  // namespace memseal::track
