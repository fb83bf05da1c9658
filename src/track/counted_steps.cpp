#include "track/counted_steps.h"

#include <atomic>

#include "track/python_frames.h"
#include "track/stack_capture.h"

namespace memseal::track {

namespace {
std::atomic<CountedStepHandler> g_handler{nullptr};
}  // namespace

void setCountedStepHandler(CountedStepHandler handler) {
  g_handler.store(handler, std::memory_order_release);
}

void countStepsOnThisThread(std::uint64_t allocations) {
  threadState().allocations_until_step = allocations;
}

std::uint64_t whereThisThreadIs() {
  TrackerWork work;
  if (pythonFramesAvailable()) {
    if (std::uint32_t python = capturePythonStack()) return python;
  }
  CapturedStack stack;
  captureStack(stack, 0);
  return stackHash(stack);
}

void takeCountedStep(ThreadState& state) {
  CountedStepHandler handler = g_handler.load(std::memory_order_acquire);
  // The handler may allocate (a report written at the step): those allocations are its own.
  std::uint64_t next = handler != nullptr ? handler() : 0;
  state.allocations_until_step = next;
}

}  // namespace memseal::track
