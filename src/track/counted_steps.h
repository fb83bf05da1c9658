// Steps marked by counting a thread's CPU allocations. `memseal run` finds a loop through a
// RecordFunction callback on every op, and every op pays for libtorch's RecordFunction machinery
// while any callback is installed; once each iteration of the loop is known to make the same number
// of allocations, the runtime removes the callback and lets the allocator hook end each step
// instead: a countdown on the loop's thread, decremented by each tracked allocation, that calls the
// runtime's handler when it reaches zero (before the allocation is recorded, so that allocation is
// the new step's first).
#pragma once

#include <cstdint>

#include "track/thread_state.h"

namespace memseal::track {

// Takes the step that ends at this allocation and returns how many tracked allocations the next
// one lasts (0: no more counted steps on this thread). Runs on the counting thread, inside the
// allocation, with nothing of the tracker's held.
using CountedStepHandler = std::uint64_t (*)();
void setCountedStepHandler(CountedStepHandler handler);

// The calling thread ends a step after `allocations` more tracked allocations (0: never).
void countStepsOnThisThread(std::uint64_t allocations);

// Where the calling thread is, as a number that is the same each time it passes the same place:
// its Python stack in a Python program, else a hash of its native stack. A counted step's first
// allocation is the first of an iteration: where it is made changes when the loop has ended.
std::uint64_t whereThisThreadIs();

// Hot path, for each allocation the hook is about to track.
void takeCountedStep(ThreadState& state);
inline void countAllocationTowardsStep(ThreadState& state) {
  if (state.allocations_until_step != 0 && --state.allocations_until_step == 0) {
    takeCountedStep(state);
  }
}

}  // namespace memseal::track
