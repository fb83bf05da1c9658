// The planners' input after validation, shared by the strategies (offset_planner.cpp) and the
// checker that proves a plan (plan_checker.cpp), so that each of them can do plain arithmetic: no
// aligned size, offset + size or block size can overflow afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/offset_planner.h"

namespace memseal::plan {

using AllocationId = std::uint32_t;

struct PreparedInput {
  std::vector<std::size_t> aligned_sizes;
  std::vector<AllocationId> occupying;  // allocations with nonzero size; the rest occupy nothing
  std::size_t naive_sum = 0;
};

// Throws std::invalid_argument for an alignment that is not a power of two, an allocation that
// ends before it starts, or sizes that overflow size_t once aligned or summed.
PreparedInput prepareInput(const std::vector<PlannedAllocation>& allocations,
                           std::size_t alignment);

// The occupying allocations twice: in order of first use (when each starts) and of last use (when
// each ends), for sweeps that walk starts and ends together.
struct UseOrder {
  std::vector<AllocationId> by_first;
  std::vector<AllocationId> by_last;
};

UseOrder orderByUse(const std::vector<PlannedAllocation>& allocations, const PreparedInput& input);

}  // namespace memseal::plan
