// CUDA tensors in the live table: every block the CUDA caching allocator hands out while a session
// runs becomes a LiveRecord (flag kDeviceBlock), so the leak detector's census, its categories and
// lifetime scopes see CUDA tensors exactly as they see CPU ones. The records come from the
// allocator's trace hook (track/device_events.h), which runs under the allocator's lock: a record
// is made there with the op and scope only, and the op's end (op_observer) adds the tensor's
// signature and the stack, outside that lock.
#pragma once

#include <cstdint>

#include "track/thread_state.h"

namespace at {
class TensorBase;
}

namespace memseal::track {

// A block handed to a tensor on `device` (the hook's ALLOC). The calling thread is the allocating
// one. Takes the live table's shard lock only. Returns the site the block was given (its op, or
// on a step whose ops are not watched the site replayed from the last watched one: op_sampling.h).
std::uint32_t recordDeviceBlock(ThreadState& state, int device, std::uint64_t address,
                                std::uint64_t bytes);
// The tensor let go of the block (the hook's FREE_REQUESTED), whether or not a session runs: a
// record outliving its block would stand for whatever the allocator puts there next.
void forgetDeviceBlock(std::uint64_t address);

// At an op's end, for an output whose storage is on a CUDA device: fills in the record's signature
// and weak tensor reference when this op made the block on this thread, and completes a pending
// site with `site_of_ending_op(state)` (called only then).
void onDeviceOpOutput(ThreadState& state, const at::TensorBase& tensor,
                      std::uint64_t device_start_serial,
                      std::uint32_t (*site_of_ending_op)(ThreadState& state));

}  // namespace memseal::track
