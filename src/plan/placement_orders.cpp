#include "plan/placement_orders.h"

#include <algorithm>
#include <vector>

namespace memseal::plan {

BreadthProfile computeBreadthProfile(const std::vector<PlannedAllocation>& allocations,
                                     const PreparedInput& input) {
  const auto [by_first, by_last] = orderByUse(allocations, input);
  BreadthProfile profile;
  std::size_t live = 0;
  std::size_t next_end = 0;
  for (std::size_t next_start = 0; next_start < by_first.size();) {
    const std::uint32_t step = allocations[by_first[next_start]].first_use;
    for (; next_start < by_first.size() && allocations[by_first[next_start]].first_use == step;
         ++next_start) {
      live += input.aligned_sizes[by_first[next_start]];
    }
    // Lifetimes are inclusive, so whatever ends exactly at `step` is still live here.
    for (; next_end < by_last.size() && allocations[by_last[next_end]].last_use < step;
         ++next_end) {
      live -= input.aligned_sizes[by_last[next_end]];
    }
    profile.steps.push_back(step);
    profile.live_bytes.push_back(live);
  }
  return profile;
}

namespace {

// Sparse table answering "which step in [lo, hi] has the most live bytes" in O(1) after
// O(n log n) setup; ties go to the earlier step so the breadth order is deterministic.
class PeakStepTable {
 public:
  explicit PeakStepTable(const std::vector<std::size_t>& live_bytes) : live_bytes_(live_bytes) {
    std::vector<std::uint32_t> identity(live_bytes.size());
    for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::uint32_t>(i);
    levels_.push_back(std::move(identity));
    for (std::size_t width = 2; width <= live_bytes.size(); width *= 2) {
      const std::vector<std::uint32_t>& previous = levels_.back();
      std::vector<std::uint32_t> level(live_bytes.size() - width + 1);
      for (std::size_t i = 0; i < level.size(); ++i) {
        level[i] = busier(previous[i], previous[i + width / 2]);
      }
      levels_.push_back(std::move(level));
    }
  }

  std::uint32_t busiestStep(std::size_t lo, std::size_t hi) const {
    std::size_t level = 0;
    while ((std::size_t{2} << level) <= hi - lo + 1) ++level;
    return busier(levels_[level][lo], levels_[level][hi + 1 - (std::size_t{1} << level)]);
  }

 private:
  std::uint32_t busier(std::uint32_t a, std::uint32_t b) const {
    if (live_bytes_[a] != live_bytes_[b]) return live_bytes_[a] > live_bytes_[b] ? a : b;
    return std::min(a, b);
  }

  const std::vector<std::size_t>& live_bytes_;
  std::vector<std::vector<std::uint32_t>> levels_;
};

}  // namespace

std::vector<AllocationId> orderBySize(const std::vector<PlannedAllocation>& allocations,
                                      const PreparedInput& input) {
  // TFLite's order: largest first, earlier first use breaking ties.
  std::vector<AllocationId> order = input.occupying;
  std::sort(order.begin(), order.end(), [&](AllocationId a, AllocationId b) {
    if (input.aligned_sizes[a] != input.aligned_sizes[b]) {
      return input.aligned_sizes[a] > input.aligned_sizes[b];
    }
    if (allocations[a].first_use != allocations[b].first_use) {
      return allocations[a].first_use < allocations[b].first_use;
    }
    return a < b;
  });
  return order;
}

std::vector<AllocationId> orderByBreadth(const std::vector<PlannedAllocation>& allocations,
                                         const PreparedInput& input,
                                         const BreadthProfile& profile) {
  // Each allocation is claimed by the busiest step of its lifetime; steps go busiest first and
  // their allocations largest first. That is the paper's loop over operators by breadth,
  // without materialising every step's live set (which can be O(n^2)).
  const PeakStepTable table(profile.live_bytes);
  std::vector<std::uint32_t> claiming_step(allocations.size(), 0);
  for (AllocationId id : input.occupying) {
    const auto first =
        std::lower_bound(profile.steps.begin(), profile.steps.end(), allocations[id].first_use);
    const auto past_last = std::upper_bound(first, profile.steps.end(), allocations[id].last_use);
    claiming_step[id] =
        table.busiestStep(first - profile.steps.begin(), (past_last - profile.steps.begin()) - 1);
  }
  std::vector<AllocationId> order = input.occupying;
  std::sort(order.begin(), order.end(), [&](AllocationId a, AllocationId b) {
    const std::size_t breadth_a = profile.live_bytes[claiming_step[a]];
    const std::size_t breadth_b = profile.live_bytes[claiming_step[b]];
    if (breadth_a != breadth_b) return breadth_a > breadth_b;
    if (claiming_step[a] != claiming_step[b]) return claiming_step[a] < claiming_step[b];
    if (input.aligned_sizes[a] != input.aligned_sizes[b]) {
      return input.aligned_sizes[a] > input.aligned_sizes[b];
    }
    return a < b;
  });
  return order;
}

std::vector<AllocationId> orderByFirstUse(const std::vector<PlannedAllocation>& allocations,
                                          const PreparedInput& input) {
  // Longer lifetimes first among equal starts, so an enclosing allocation precedes the ones
  // nested inside it (what makes this order exact on strict stacks).
  std::vector<AllocationId> order = input.occupying;
  std::sort(order.begin(), order.end(), [&](AllocationId a, AllocationId b) {
    if (allocations[a].first_use != allocations[b].first_use) {
      return allocations[a].first_use < allocations[b].first_use;
    }
    if (allocations[a].last_use != allocations[b].last_use) {
      return allocations[a].last_use > allocations[b].last_use;
    }
    return a < b;
  });
  return order;
}

}  // namespace memseal::plan
