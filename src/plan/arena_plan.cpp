// Allocations still alive when the region ended escape the plan (outputs come from the normal
// allocator); the rest are handed to the offset planner with their recorded lifetimes.
#include "plan/arena_plan.h"

#include <algorithm>

#include "plan/offset_planner.h"

namespace memseal::plan {

std::shared_ptr<const ArenaPlan> buildArenaPlan(const std::string& key, const RecordedRun& run) {
  auto result = std::make_shared<ArenaPlan>();
  ArenaPlan& plan = *result;
  plan.key = key;
  plan.sizes = run.sizes;
  std::size_t count = plan.sizes.size();
  plan.escapes.assign(count, false);
  plan.offsets.assign(count, 0);
  plan.offset_rank.assign(count, 0);
  plan.must_be_freed.resize(count);
  std::vector<PlannedAllocation> planned;
  std::vector<std::uint32_t> planned_index;
  for (std::size_t i = 0; i < count; ++i) {
    if (!run.freed[i]) {
      plan.escapes[i] = true;
      continue;
    }
    planned.push_back({plan.sizes[i], run.first_use[i], run.last_use[i]});
    planned_index.push_back(static_cast<std::uint32_t>(i));
  }
  OffsetPlan offsets = planOffsets(planned);
  plan.distinct_offsets = offsets.offsets;
  std::sort(plan.distinct_offsets.begin(), plan.distinct_offsets.end());
  plan.distinct_offsets.erase(
      std::unique(plan.distinct_offsets.begin(), plan.distinct_offsets.end()),
      plan.distinct_offsets.end());
  std::vector<std::vector<std::uint32_t>> predecessors = sharedBytePredecessors(planned, offsets);
  for (std::size_t p = 0; p < planned.size(); ++p) {
    std::uint32_t index = planned_index[p];
    plan.offsets[index] = offsets.offsets[p];
    plan.offset_rank[index] = static_cast<std::uint32_t>(
        std::lower_bound(plan.distinct_offsets.begin(), plan.distinct_offsets.end(),
                         offsets.offsets[p]) -
        plan.distinct_offsets.begin());
    for (std::uint32_t earlier : predecessors[p]) {
      plan.must_be_freed[index].push_back(planned_index[earlier]);
    }
  }
  plan.summary.key = key;
  plan.summary.block_bytes = offsets.block_size;
  plan.summary.lower_bound = offsets.lower_bound;
  plan.summary.naive_sum = offsets.naive_sum;
  plan.summary.planned_allocations = planned.size();
  plan.summary.escaping_allocations = count - planned.size();
  plan.summary.strategy = offsets.strategy;
  return result;
}

}  // namespace memseal::plan
