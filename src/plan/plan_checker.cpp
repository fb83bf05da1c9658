// The sweep-line checker that proves a plan never lets two live allocations share a byte, and the
// order in which allocations reuse each other's bytes (what a replay must respect).
#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/offset_planner.h"
#include "plan/prepared_input.h"

namespace memseal::plan {

namespace {

std::string allocationName(AllocationId id) { return "allocation " + std::to_string(id); }

}  // namespace

std::vector<std::vector<std::uint32_t>> sharedBytePredecessors(
    const std::vector<PlannedAllocation>& allocations, const OffsetPlan& plan) {
  std::vector<std::vector<std::uint32_t>> predecessors(allocations.size());
  std::vector<AllocationId> by_offset;
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    if (allocations[i].size > 0) by_offset.push_back(static_cast<AllocationId>(i));
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [&](AllocationId a, AllocationId b) { return plan.offsets[a] < plan.offsets[b]; });
  for (std::size_t i = 0; i < by_offset.size(); ++i) {
    AllocationId a = by_offset[i];
    std::size_t a_end = plan.offsets[a] + allocations[a].size;
    // Every later b in this order starts at or after a; it overlaps a while it starts before a
    // ends.
    for (std::size_t j = i + 1; j < by_offset.size() && plan.offsets[by_offset[j]] < a_end; ++j) {
      AllocationId b = by_offset[j];
      predecessors[std::max(a, b)].push_back(std::min(a, b));
    }
  }
  return predecessors;
}

std::string validatePlan(const std::vector<PlannedAllocation>& allocations, const OffsetPlan& plan,
                         std::size_t alignment) {
  const PreparedInput input = prepareInput(allocations, alignment);
  if (plan.offsets.size() != allocations.size()) {
    return "plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
           std::to_string(allocations.size()) + " allocations";
  }
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    const auto id = static_cast<AllocationId>(i);
    const std::size_t offset = plan.offsets[i];
    if (offset % alignment != 0) {
      return allocationName(id) + ": offset " + std::to_string(offset) +
             " is not a multiple of the alignment " + std::to_string(alignment);
    }
    if (offset > plan.block_size || input.aligned_sizes[i] > plan.block_size - offset) {
      return allocationName(id) + ": its " + std::to_string(input.aligned_sizes[i]) +
             " bytes at offset " + std::to_string(offset) + " extend past block_size " +
             std::to_string(plan.block_size);
    }
  }

  // Sweep events in order, keeping the byte ranges of live allocations in an offset-keyed map.
  // Ranges in the map are disjoint (the first clash ends the sweep), so a new range only has to
  // be compared with its two neighbours in offset order.
  const auto [by_first, by_last] = orderByUse(allocations, input);
  const auto end_of = [&](AllocationId id) { return plan.offsets[id] + input.aligned_sizes[id]; };
  const auto describeClash = [&](AllocationId a, AllocationId b, std::uint32_t event) {
    return "allocations " + std::to_string(std::min(a, b)) + " and " +
           std::to_string(std::max(a, b)) + " share bytes [" +
           std::to_string(std::max(plan.offsets[a], plan.offsets[b])) + ", " +
           std::to_string(std::min(end_of(a), end_of(b))) + ") while both are live at event " +
           std::to_string(event);
  };
  std::map<std::size_t, AllocationId> live_by_offset;
  std::size_t next_end = 0;
  for (AllocationId id : by_first) {
    const std::uint32_t event = allocations[id].first_use;
    // Lifetimes are inclusive: only what ended strictly before this event is gone.
    for (; next_end < by_last.size() && allocations[by_last[next_end]].last_use < event;
         ++next_end) {
      live_by_offset.erase(plan.offsets[by_last[next_end]]);
    }
    const auto above = live_by_offset.lower_bound(plan.offsets[id]);
    if (above != live_by_offset.end() && above->first < end_of(id)) {
      return describeClash(id, above->second, event);
    }
    if (above != live_by_offset.begin()) {
      const AllocationId below = std::prev(above)->second;
      if (end_of(below) > plan.offsets[id]) return describeClash(id, below, event);
    }
    live_by_offset.emplace(plan.offsets[id], id);
  }
  return "";
}

}  // namespace memseal::plan
