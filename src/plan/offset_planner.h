// Assigns every recorded allocation a byte offset inside one pre-allocated arena block, so that
// allocations whose lifetimes overlap never share bytes, and checks such plans independently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memseal::plan {

// One recorded allocation. Lifetimes are inclusive: [first_use, last_use] in event-index units,
// so an allocation freed at event 7 still conflicts with one allocated at event 7.
struct PlannedAllocation {
  std::size_t size;         // bytes requested (may be 0)
  std::uint32_t first_use;  // event index of its allocation
  std::uint32_t last_use;   // event index of its free; must be >= first_use
};

struct OffsetPlan {
  std::vector<std::size_t> offsets;  // offsets[i] for input i, each a multiple of the alignment
  std::size_t block_size = 0;        // bytes the block needs (max of offset + aligned size)
  std::size_t lower_bound = 0;       // most aligned bytes ever live at once (no plan is smaller)
  std::size_t naive_sum = 0;         // sum of aligned sizes (what a no-reuse plan would need)
  const char* strategy = "";         // name of the strategy that produced it
};

constexpr std::size_t kDefaultAlignment = 64;  // libtorch's CPU alignment

// Greedy strategies are an allocation order (who gets placed first) crossed with a gap choice
// (where in the free space it goes). None is best on every input, so planOffsets tries them all.
enum class OffsetStrategy {
  // Largest first, smallest hole that fits, else on top: TFLite's greedy-by-size planner
  // (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net Inference").
  kGreedyBySizeBestFit,
  // Allocations live at the busiest event first, largest first within it: the paper's
  // greedy-by-breadth, with the same best-fit holes.
  kGreedyByBreadthBestFit,
  // In recording order with best-fit holes; exact on strict stacks and on equal sizes.
  kAllocationOrderBestFit,
  // The same three orders, but aiming for a block of exactly lower_bound bytes: a hole that
  // reaches the lower bound is filled from the top down, so neighbours in a producer->consumer
  // chain alternate between the two ends of the block (the optimal "ping-pong" layout). When
  // that does no better than best fit in the same order, the best-fit plan (and its name) is
  // returned, so no strategy ever needs more than naive_sum.
  kGreedyBySizeTwoSided,
  kGreedyByBreadthTwoSided,
  kAllocationOrderTwoSided,
};

// Every strategy, in the order planOffsets tries them (ties go to the earlier one).
inline constexpr OffsetStrategy kAllOffsetStrategies[] = {
    OffsetStrategy::kGreedyBySizeBestFit,     OffsetStrategy::kGreedyByBreadthBestFit,
    OffsetStrategy::kAllocationOrderBestFit,  OffsetStrategy::kGreedyBySizeTwoSided,
    OffsetStrategy::kGreedyByBreadthTwoSided, OffsetStrategy::kAllocationOrderTwoSided,
};

// A stable, human-readable name such as "greedy-by-size/best-fit".
const char* strategyName(OffsetStrategy strategy);

// Rounds `bytes` up to a multiple of `alignment`. Throws std::invalid_argument when the
// alignment is not a nonzero power of two or the result does not fit in size_t.
std::size_t alignUp(std::size_t bytes, std::size_t alignment);

// The most aligned bytes live at any one event: no valid plan's block can be smaller.
std::size_t liveBytesLowerBound(const std::vector<PlannedAllocation>& allocations,
                                std::size_t alignment = kDefaultAlignment);

// Runs every strategy (stopping early once one reaches lower_bound) and returns the smallest
// plan. Zero-size allocations get offset 0 and occupy nothing. Throws std::invalid_argument,
// naming the allocation index, for last_use < first_use, for a size that overflows when
// aligned or summed, and for an alignment that is not a nonzero power of two.
OffsetPlan planOffsets(const std::vector<PlannedAllocation>& allocations,
                       std::size_t alignment = kDefaultAlignment);

// One strategy on its own, e.g. to compare strategies or to test each of them.
OffsetPlan planOffsetsWith(const std::vector<PlannedAllocation>& allocations,
                           OffsetStrategy strategy, std::size_t alignment = kDefaultAlignment);

// For each allocation, the earlier ones (by index) whose bytes in `plan` overlap its own (so their
// lifetimes do not): those must have been freed before it may be placed. Zero-size allocations
// overlap nothing. A sweep in offset order visits only overlapping pairs, not all n^2 of them.
std::vector<std::vector<std::uint32_t>> sharedBytePredecessors(
    const std::vector<PlannedAllocation>& allocations, const OffsetPlan& plan);

// Checks a plan without trusting the planner: returns "" when every offset is aligned, every
// allocation fits inside block_size, and no two allocations with overlapping lifetimes share a
// byte; otherwise describes the first violation found. O(n log n) sweep over events. Invalid
// input (as for planOffsets) throws std::invalid_argument rather than blaming the plan.
std::string validatePlan(const std::vector<PlannedAllocation>& allocations, const OffsetPlan& plan,
                         std::size_t alignment = kDefaultAlignment);

}  // namespace memseal::plan
