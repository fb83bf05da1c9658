// Where the iterations of a loop found in a thread's ops start (the op a step ends at), and what
// ops one of its usual iterations runs. Pure: no lock, no torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "analyze/repeating_ops.h"
#include "inject/inner_loops.h"

namespace memseal::inject {

// The ops of the loop's usual iterations in `ops`: those from a call of `anchor` to the next that
// are `period` ops long (an iteration that runs on into what follows the loop is longer).
std::vector<std::uint32_t> usualIterationOps(const std::vector<std::uint32_t>& ops,
                                             std::uint32_t anchor, std::size_t period);

// Moves the loop's anchor to the op of its iteration where the least tensor memory is live (`live`:
// as each of `ops` began), among the ops that run once per iteration and may start one.
void startAtLeastLiveMemory(analyze::LoopShape& loop, const std::vector<std::uint32_t>& ops,
                            const std::vector<std::int64_t>& live, const InnerLoops& inner);

}  // namespace memseal::inject
