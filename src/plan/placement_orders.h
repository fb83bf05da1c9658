// The orders in which the greedy offset planners place allocations (offset_planner.h's
// strategies): largest first, busiest event first (greedy-by-breadth), or in order of first use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/offset_planner.h"
#include "plan/prepared_input.h"

namespace memseal::plan {

// Aligned bytes live at each distinct first_use. Live bytes only rise when an allocation
// starts, so these steps hold every peak, and there are at most n of them however sparse the
// event indices are.
struct BreadthProfile {
  std::vector<std::uint32_t> steps;
  std::vector<std::size_t> live_bytes;

  std::size_t peak() const {
    return live_bytes.empty() ? 0 : *std::max_element(live_bytes.begin(), live_bytes.end());
  }
};
BreadthProfile computeBreadthProfile(const std::vector<PlannedAllocation>& allocations,
                                     const PreparedInput& input);

// Largest first, earlier first use breaking ties (TFLite's order).
std::vector<AllocationId> orderBySize(const std::vector<PlannedAllocation>& allocations,
                                      const PreparedInput& input);
// The allocations of the busiest event first, largest first within it.
std::vector<AllocationId> orderByBreadth(const std::vector<PlannedAllocation>& allocations,
                                         const PreparedInput& input, const BreadthProfile& profile);
// In order of first use, longer lifetimes first among equal starts.
std::vector<AllocationId> orderByFirstUse(const std::vector<PlannedAllocation>& allocations,
                                          const PreparedInput& input);

}  // namespace memseal::plan
