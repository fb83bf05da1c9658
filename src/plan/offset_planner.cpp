// Greedy offset planners (TFLite-style greedy-by-size and its relatives); plan_checker.cpp holds
// the sweep-line checker that proves a plan never lets two live allocations share a byte.
#include "plan/offset_planner.h"
#include "plan/placement_orders.h"
#include "plan/prepared_input.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace memseal::plan {
namespace {

constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();

void requirePowerOfTwo(std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw std::invalid_argument("alignment must be a nonzero power of two, got " +
                                std::to_string(alignment));
  }
}

// Only for callers that already checked the alignment and ruled out overflow.
std::size_t alignUpUnchecked(std::size_t bytes, std::size_t alignment) {
  return (bytes + alignment - 1) & ~(alignment - 1);
}

std::string describeAllocation(AllocationId id) { return "allocation " + std::to_string(id); }

}  // namespace

PreparedInput prepareInput(const std::vector<PlannedAllocation>& allocations,
                           std::size_t alignment) {
  requirePowerOfTwo(alignment);
  if (allocations.size() > std::numeric_limits<AllocationId>::max()) {
    throw std::invalid_argument("too many allocations to plan: " +
                                std::to_string(allocations.size()));
  }
  PreparedInput input;
  input.aligned_sizes.reserve(allocations.size());
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    const PlannedAllocation& allocation = allocations[i];
    const auto id = static_cast<AllocationId>(i);
    if (allocation.last_use < allocation.first_use) {
      throw std::invalid_argument(describeAllocation(id) + ": last_use " +
                                  std::to_string(allocation.last_use) + " is before first_use " +
                                  std::to_string(allocation.first_use));
    }
    if (allocation.size > kMaxSize - (alignment - 1)) {
      throw std::invalid_argument(describeAllocation(id) + ": size " +
                                  std::to_string(allocation.size) +
                                  " overflows size_t when aligned to " + std::to_string(alignment));
    }
    const std::size_t aligned = alignUpUnchecked(allocation.size, alignment);
    if (aligned > kMaxSize - input.naive_sum) {
      throw std::invalid_argument(describeAllocation(id) + ": size " +
                                  std::to_string(allocation.size) +
                                  " makes the total of all aligned sizes overflow size_t");
    }
    input.naive_sum += aligned;
    input.aligned_sizes.push_back(aligned);
    if (aligned > 0) input.occupying.push_back(id);
  }
  return input;
}

UseOrder orderByUse(const std::vector<PlannedAllocation>& allocations, const PreparedInput& input) {
  UseOrder order{input.occupying, input.occupying};
  std::sort(order.by_first.begin(), order.by_first.end(), [&](AllocationId a, AllocationId b) {
    return allocations[a].first_use < allocations[b].first_use;
  });
  std::sort(order.by_last.begin(), order.by_last.end(), [&](AllocationId a, AllocationId b) {
    return allocations[a].last_use < allocations[b].last_use;
  });
  return order;
}

namespace {

enum class GapChoice { kBestFit, kTwoSided };

// Walks the byte ranges of already-placed, lifetime-overlapping allocations in offset order and
// keeps the smallest hole that fits (the earliest on ties), as TFLite's SimpleMemoryArena does.
class GapSearch {
 public:
  explicit GapSearch(std::size_t size) : size_(size) {}

  void visit(std::size_t offset, std::size_t end) {
    if (offset > covered_end_) {
      const std::size_t hole = offset - covered_end_;
      if (hole >= size_ && (!found_ || hole < best_hole_)) {
        found_ = true;
        best_hole_ = hole;
        best_start_ = covered_end_;
      }
    }
    covered_end_ = std::max(covered_end_, end);
  }

  std::size_t choose(GapChoice choice, std::size_t capacity) const {
    if (choice == GapChoice::kTwoSided && covered_end_ > 0 && covered_end_ <= capacity) {
      // The space between the highest neighbour and the target capacity is one more hole; one
      // placed there sits flush against the top, leaving the low end free for the next neighbour.
      const std::size_t top_hole = capacity - covered_end_;
      if (top_hole >= size_ && (!found_ || top_hole < best_hole_)) return capacity - size_;
    }
    return found_ ? best_start_ : covered_end_;
  }

 private:
  std::size_t size_;
  std::size_t covered_end_ = 0;
  std::size_t best_hole_ = 0;
  std::size_t best_start_ = 0;
  bool found_ = false;
};

struct Placement {
  std::vector<std::size_t> offsets;
  std::size_t block_size = 0;
};

// Places allocations one at a time, each against the already-placed allocations whose
// lifetimes overlap it. Those are found with a max-segment-tree over allocations sorted by
// first_use (leaf = last_use + 1 once placed), in O((k + 1) log n) for k of them, so the usual
// case of short lifetimes costs O(n log n). When lifetimes overlap heavily, sorting k
// neighbours per allocation would cost O(n^2 log n), so past a threshold the placer switches
// to TFLite's scan over all placed allocations in offset order: O(n^2) at worst. That list is
// brought up to date only when such a scan needs it (merging in what was placed since), so
// inputs that never need it never pay for it.
class GreedyPlacer {
 public:
  GreedyPlacer(const std::vector<PlannedAllocation>& allocations, const PreparedInput& input)
      : allocations_(allocations),
        sizes_(input.aligned_sizes),
        by_first_use_(input.occupying),
        position_(allocations.size(), 0) {
    std::sort(by_first_use_.begin(), by_first_use_.end(), [&](AllocationId a, AllocationId b) {
      return allocations[a].first_use < allocations[b].first_use;
    });
    first_uses_.reserve(by_first_use_.size());
    for (std::size_t i = 0; i < by_first_use_.size(); ++i) {
      first_uses_.push_back(allocations[by_first_use_[i]].first_use);
      position_[by_first_use_[i]] = static_cast<std::uint32_t>(i);
    }
    while (leaf_count_ < by_first_use_.size()) leaf_count_ *= 2;
  }

  Placement place(const std::vector<AllocationId>& order, GapChoice choice, std::size_t capacity) {
    Placement placement;
    placement.offsets.assign(allocations_.size(), 0);
    max_last_use_.assign(2 * leaf_count_, 0);
    by_offset_.clear();
    merged_ = 0;
    for (std::size_t placed = 0; placed < order.size(); ++placed) {
      const AllocationId id = order[placed];
      const PlannedAllocation& allocation = allocations_[id];
      GapSearch search(sizes_[id]);
      if (!visitNeighboursFromTree(allocation, placement.offsets, placed, search)) {
        mergePlacedByOffset(order, placed, placement.offsets);
        for (const PlacedRange& other : by_offset_) {
          if (other.first_use <= allocation.last_use && other.last_use >= allocation.first_use) {
            search.visit(other.offset, other.end);
          }
        }
      }
      const std::size_t offset = search.choose(choice, capacity);
      placement.offsets[id] = offset;
      placement.block_size = std::max(placement.block_size, offset + sizes_[id]);
      markPlaced(id);
    }
    return placement;
  }

 private:
  // Past this many neighbours (plus a share of everything placed) the offset-order scan is
  // cheaper than collecting and sorting them.
  static constexpr std::size_t kMinNeighbourLimit = 64;
  static constexpr std::size_t kPlacedShareDivisor = 16;

  // Feeds the placed neighbours of `allocation` to `search` in offset order; returns false,
  // having fed nothing, when there are too many of them to be worth sorting.
  bool visitNeighboursFromTree(const PlannedAllocation& allocation,
                               const std::vector<std::size_t>& offsets, std::size_t placed,
                               GapSearch& search) {
    // Neighbours started no later than this one ends (a prefix in first_use order) and end no
    // earlier than it starts (a subtree max >= first_use + 1 prunes the rest).
    const std::size_t started_in_time =
        std::upper_bound(first_uses_.begin(), first_uses_.end(), allocation.last_use) -
        first_uses_.begin();
    const std::size_t limit = kMinNeighbourLimit + placed / kPlacedShareDivisor;
    hits_.clear();
    if (!collect(1, 0, leaf_count_, started_in_time, std::uint64_t{allocation.first_use} + 1,
                 limit)) {
      return false;
    }
    neighbours_.clear();
    for (std::uint32_t hit : hits_) {
      const AllocationId other = by_first_use_[hit];
      neighbours_.emplace_back(offsets[other], offsets[other] + sizes_[other]);
    }
    std::sort(neighbours_.begin(), neighbours_.end());
    for (const auto& [offset, end] : neighbours_) search.visit(offset, end);
    return true;
  }

  bool collect(std::size_t node, std::size_t node_begin, std::size_t node_width,
               std::size_t end_position, std::uint64_t min_value, std::size_t limit) {
    if (node_begin >= end_position || max_last_use_[node] < min_value) return true;
    if (node_width == 1) {
      if (hits_.size() == limit) return false;
      hits_.push_back(static_cast<std::uint32_t>(node_begin));
      return true;
    }
    const std::size_t half = node_width / 2;
    return collect(2 * node, node_begin, half, end_position, min_value, limit) &&
           collect(2 * node + 1, node_begin + half, half, end_position, min_value, limit);
  }

  void markPlaced(AllocationId id) {
    std::size_t node = leaf_count_ + position_[id];
    max_last_use_[node] = std::uint64_t{allocations_[id].last_use} + 1;
    for (node /= 2; node >= 1; node /= 2) {
      max_last_use_[node] = std::max(max_last_use_[2 * node], max_last_use_[2 * node + 1]);
    }
  }

  // Brings by_offset_ up to order[0, placed): sorts what was placed since the last merge and
  // merges it in, O(placed) plus the sort, no more than the scan that follows.
  void mergePlacedByOffset(const std::vector<AllocationId>& order, std::size_t placed,
                           const std::vector<std::size_t>& offsets) {
    const std::size_t sorted_count = by_offset_.size();
    for (; merged_ < placed; ++merged_) {
      const AllocationId id = order[merged_];
      by_offset_.push_back({offsets[id], offsets[id] + sizes_[id], allocations_[id].first_use,
                            allocations_[id].last_use});
    }
    const auto by_start = [](const PlacedRange& a, const PlacedRange& b) {
      return a.offset < b.offset;
    };
    std::sort(by_offset_.begin() + sorted_count, by_offset_.end(), by_start);
    std::inplace_merge(by_offset_.begin(), by_offset_.begin() + sorted_count, by_offset_.end(),
                       by_start);
  }

  const std::vector<PlannedAllocation>& allocations_;
  const std::vector<std::size_t>& sizes_;
  std::vector<AllocationId> by_first_use_;
  std::vector<std::uint32_t> first_uses_;  // first_use of by_first_use_[i], for binary search
  std::vector<std::uint32_t> position_;    // index of each allocation in by_first_use_
  std::size_t leaf_count_ = 1;
  std::vector<std::uint64_t> max_last_use_;  // segment tree; 0 marks "not placed yet"
  // Placed allocations by offset, copied out so the scan reads memory in order.
  struct PlacedRange {
    std::size_t offset;
    std::size_t end;
    std::uint32_t first_use;
    std::uint32_t last_use;
  };
  std::vector<PlacedRange> by_offset_;  // holds order[0, merged_)
  std::size_t merged_ = 0;
  std::vector<std::uint32_t> hits_;
  std::vector<std::pair<std::size_t, std::size_t>> neighbours_;
};

enum class PlacementOrder { kBySize, kByBreadth, kByFirstUse };

struct StrategyParts {
  PlacementOrder order;
  GapChoice choice;
  OffsetStrategy best_fit_twin;  // the best-fit strategy with the same order
};

StrategyParts partsOf(OffsetStrategy strategy) {
  using S = OffsetStrategy;
  switch (strategy) {
    case S::kGreedyBySizeBestFit:
      return {PlacementOrder::kBySize, GapChoice::kBestFit, strategy};
    case S::kGreedyByBreadthBestFit:
      return {PlacementOrder::kByBreadth, GapChoice::kBestFit, strategy};
    case S::kAllocationOrderBestFit:
      return {PlacementOrder::kByFirstUse, GapChoice::kBestFit, strategy};
    case S::kGreedyBySizeTwoSided:
      return {PlacementOrder::kBySize, GapChoice::kTwoSided, S::kGreedyBySizeBestFit};
    case S::kGreedyByBreadthTwoSided:
      return {PlacementOrder::kByBreadth, GapChoice::kTwoSided, S::kGreedyByBreadthBestFit};
    case S::kAllocationOrderTwoSided:
      return {PlacementOrder::kByFirstUse, GapChoice::kTwoSided, S::kAllocationOrderBestFit};
  }
  throw std::invalid_argument("unknown offset strategy " +
                              std::to_string(static_cast<int>(strategy)));
}

// Everything the strategies share for one input. Orders and best-fit plans are computed once
// and only when needed: planOffsets often stops after the first strategy.
class Planner {
 public:
  Planner(const std::vector<PlannedAllocation>& allocations, std::size_t alignment)
      : allocations_(allocations),
        input_(prepareInput(allocations, alignment)),
        profile_(computeBreadthProfile(allocations, input_)),
        lower_bound_(profile_.peak()),
        placer_(allocations, input_) {}

  OffsetPlan run(OffsetStrategy strategy) {
    const StrategyParts parts = partsOf(strategy);
    const OffsetPlan& best_fit = bestFitPlan(parts.order, parts.best_fit_twin);
    if (parts.choice == GapChoice::kBestFit) return best_fit;
    // Best fit never needs more than naive_sum (each allocation ends at most at the total size
    // of those placed so far), but two-sided placement can overshoot badly once its target is
    // out of reach, since whatever misses the target is stacked above allocations parked at
    // the top. Keeping the smaller plan gives every strategy best fit's guarantee.
    Placement two_sided = placer_.place(order(parts.order), GapChoice::kTwoSided, lower_bound_);
    if (two_sided.block_size >= best_fit.block_size) return best_fit;
    return makePlan(std::move(two_sided), strategy);
  }

 private:
  const std::vector<AllocationId>& order(PlacementOrder which) {
    std::optional<std::vector<AllocationId>>& cached = orders_[static_cast<int>(which)];
    if (!cached) {
      switch (which) {
        case PlacementOrder::kBySize:
          cached = orderBySize(allocations_, input_);
          break;
        case PlacementOrder::kByBreadth:
          cached = orderByBreadth(allocations_, input_, profile_);
          break;
        case PlacementOrder::kByFirstUse:
          cached = orderByFirstUse(allocations_, input_);
          break;
      }
    }
    return *cached;
  }

  const OffsetPlan& bestFitPlan(PlacementOrder which, OffsetStrategy strategy) {
    std::optional<OffsetPlan>& cached = best_fit_plans_[static_cast<int>(which)];
    if (!cached) {
      cached = makePlan(placer_.place(order(which), GapChoice::kBestFit, lower_bound_), strategy);
    }
    return *cached;
  }

  OffsetPlan makePlan(Placement placement, OffsetStrategy strategy) const {
    OffsetPlan plan;
    plan.offsets = std::move(placement.offsets);
    plan.block_size = placement.block_size;
    plan.lower_bound = lower_bound_;
    plan.naive_sum = input_.naive_sum;
    plan.strategy = strategyName(strategy);
    return plan;
  }

  const std::vector<PlannedAllocation>& allocations_;
  PreparedInput input_;
  BreadthProfile profile_;
  std::size_t lower_bound_;
  GreedyPlacer placer_;
  std::optional<std::vector<AllocationId>> orders_[3];  // indexed by PlacementOrder
  std::optional<OffsetPlan> best_fit_plans_[3];         // indexed by PlacementOrder
};

}  // namespace

const char* strategyName(OffsetStrategy strategy) {
  switch (strategy) {
    case OffsetStrategy::kGreedyBySizeBestFit:
      return "greedy-by-size/best-fit";
    case OffsetStrategy::kGreedyByBreadthBestFit:
      return "greedy-by-breadth/best-fit";
    case OffsetStrategy::kAllocationOrderBestFit:
      return "allocation-order/best-fit";
    case OffsetStrategy::kGreedyBySizeTwoSided:
      return "greedy-by-size/two-sided";
    case OffsetStrategy::kGreedyByBreadthTwoSided:
      return "greedy-by-breadth/two-sided";
    case OffsetStrategy::kAllocationOrderTwoSided:
      return "allocation-order/two-sided";
  }
  return "unknown";
}

std::size_t alignUp(std::size_t bytes, std::size_t alignment) {
  requirePowerOfTwo(alignment);
  if (bytes > kMaxSize - (alignment - 1)) {
    throw std::invalid_argument("size " + std::to_string(bytes) +
                                " overflows size_t when aligned to " + std::to_string(alignment));
  }
  return alignUpUnchecked(bytes, alignment);
}

std::size_t liveBytesLowerBound(const std::vector<PlannedAllocation>& allocations,
                                std::size_t alignment) {
  return computeBreadthProfile(allocations, prepareInput(allocations, alignment)).peak();
}

OffsetPlan planOffsets(const std::vector<PlannedAllocation>& allocations, std::size_t alignment) {
  Planner planner(allocations, alignment);
  std::optional<OffsetPlan> best;
  for (OffsetStrategy strategy : kAllOffsetStrategies) {
    OffsetPlan plan = planner.run(strategy);
    if (!best || plan.block_size < best->block_size) best = std::move(plan);
    if (best->block_size == best->lower_bound) break;  // nothing can beat the lower bound
  }
  return std::move(*best);
}

OffsetPlan planOffsetsWith(const std::vector<PlannedAllocation>& allocations,
                           OffsetStrategy strategy, std::size_t alignment) {
  return Planner(allocations, alignment).run(strategy);
}

}  // namespace memseal::plan
