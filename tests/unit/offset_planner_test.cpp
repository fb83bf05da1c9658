// Tests for the arena offset planner: every strategy's plans must pass the independent checker,
// the checker must catch bad plans, and the planner must hit the lower bound where it provably can.
#include "plan/offset_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace memseal::plan {
namespace {

using Allocations = std::vector<PlannedAllocation>;

constexpr std::size_t kAlignments[] = {1, 8, 64, 4096};

// Mostly realistic sizes, plus the edge cases a planner gets wrong: empty, tiny, huge.
std::size_t randomSize(std::mt19937_64& rng) {
  const std::uint64_t kind = rng() % 10;
  if (kind == 0) return 0;
  if (kind <= 3) return 1 + rng() % 64;
  if (kind <= 7) return 1 + rng() % (std::size_t{1} << 16);
  return 1 + rng() % (std::size_t{1} << 28);
}

// An allocate/free event stream like a recorder would see: random interleavings, frees in any
// order, and sometimes several operations on one event index (so lifetimes may touch or be
// a single event long).
Allocations randomRecording(std::mt19937_64& rng, std::size_t count, std::size_t max_live) {
  Allocations allocations;
  std::vector<std::size_t> live;
  std::uint32_t event = 0;
  const auto freeRandomLive = [&] {
    const std::size_t pick = rng() % live.size();
    allocations[live[pick]].last_use = event;
    live[pick] = live.back();
    live.pop_back();
  };
  while (allocations.size() < count) {
    if (live.empty() || (live.size() < max_live && rng() % 2 == 0)) {
      allocations.push_back({randomSize(rng), event, event});
      live.push_back(allocations.size() - 1);
    } else {
      freeRandomLive();
    }
    if (rng() % 4 != 0) ++event;
  }
  while (!live.empty()) {
    freeRandomLive();
    if (rng() % 4 != 0) ++event;
  }
  return allocations;
}

Allocations randomIntervals(std::mt19937_64& rng, std::size_t count, std::uint32_t horizon,
                            std::uint32_t max_length) {
  Allocations allocations;
  for (std::size_t i = 0; i < count; ++i) {
    const auto first = static_cast<std::uint32_t>(rng() % horizon);
    const auto length = static_cast<std::uint32_t>(rng() % (max_length + 1));
    allocations.push_back({randomSize(rng), first, first + length});
  }
  return allocations;
}

// Strict LIFO: every pair of lifetimes is nested or disjoint, all event indices distinct.
Allocations randomStack(std::mt19937_64& rng, std::size_t count) {
  Allocations allocations;
  std::vector<std::size_t> stack;
  for (std::uint32_t event = 0; allocations.size() < count || !stack.empty(); ++event) {
    const bool push = allocations.size() < count && (stack.empty() || rng() % 2 == 0);
    if (push) {
      allocations.push_back({randomSize(rng), event, event});
      stack.push_back(allocations.size() - 1);
    } else {
      allocations[stack.back()].last_use = event;
      stack.pop_back();
    }
  }
  return allocations;
}

// A plain feed-forward network: layer i's output lives from its producer (event i) to its only
// consumer (event i + 1).
Allocations randomChain(std::mt19937_64& rng, std::size_t count) {
  Allocations allocations;
  for (std::uint32_t i = 0; i < count; ++i) allocations.push_back({randomSize(rng), i, i + 1});
  return allocations;
}

std::size_t alignedSize(std::size_t size, std::size_t alignment) {
  return (size + alignment - 1) / alignment * alignment;
}

bool lifetimesOverlap(const PlannedAllocation& a, const PlannedAllocation& b) {
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

// O(n^2) references, deliberately written differently from the O(n log n) sweeps under test.
std::size_t bruteForceLowerBound(const Allocations& allocations, std::size_t alignment) {
  std::size_t peak = 0;
  for (const PlannedAllocation& at : allocations) {
    std::size_t live = 0;
    for (const PlannedAllocation& other : allocations) {
      if (other.first_use <= at.first_use && at.first_use <= other.last_use) {
        live += alignedSize(other.size, alignment);
      }
    }
    peak = std::max(peak, live);
  }
  return peak;
}

bool bruteForceIsValid(const Allocations& allocations, const OffsetPlan& plan,
                       std::size_t alignment) {
  if (plan.offsets.size() != allocations.size()) return false;
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    const std::size_t size_i = alignedSize(allocations[i].size, alignment);
    if (plan.offsets[i] % alignment != 0 || plan.offsets[i] + size_i > plan.block_size) {
      return false;
    }
    for (std::size_t j = 0; j < i; ++j) {
      const std::size_t size_j = alignedSize(allocations[j].size, alignment);
      const bool bytes_overlap = size_i > 0 && size_j > 0 &&
                                 plan.offsets[i] < plan.offsets[j] + size_j &&
                                 plan.offsets[j] < plan.offsets[i] + size_i;
      if (bytes_overlap && lifetimesOverlap(allocations[i], allocations[j])) return false;
    }
  }
  return true;
}

// Everything any plan must satisfy, whichever strategy made it.
::testing::AssertionResult isSoundPlan(const Allocations& allocations, const OffsetPlan& plan,
                                       std::size_t alignment) {
  const std::string violation = validatePlan(allocations, plan, alignment);
  if (!violation.empty())
    return ::testing::AssertionFailure() << plan.strategy << ": " << violation;
  std::size_t naive_sum = 0;
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    naive_sum += alignedSize(allocations[i].size, alignment);
    if (plan.offsets[i] % alignment != 0) {
      return ::testing::AssertionFailure() << plan.strategy << ": misaligned offset " << i;
    }
    if (allocations[i].size == 0 && plan.offsets[i] != 0) {
      return ::testing::AssertionFailure() << plan.strategy << ": zero-size " << i << " not at 0";
    }
  }
  if (plan.naive_sum != naive_sum) {
    return ::testing::AssertionFailure() << "naive_sum " << plan.naive_sum << " != " << naive_sum;
  }
  // Best fit places each allocation below the total size of those placed so far, so it never
  // needs more than naive_sum, and the two-sided strategies fall back to best fit when worse.
  if (plan.block_size < plan.lower_bound || plan.block_size > plan.naive_sum) {
    return ::testing::AssertionFailure()
           << plan.strategy << ": block " << plan.block_size << " outside [lower bound "
           << plan.lower_bound << ", naive sum " << plan.naive_sum << "]";
  }
  if (std::string(plan.strategy).empty()) return ::testing::AssertionFailure() << "no strategy";
  return ::testing::AssertionSuccess();
}

// Checks planOffsets and every strategy on its own (a strategy whose plans are never the
// smallest would otherwise go untested), and that planOffsets really returns the smallest.
void expectEveryStrategySound(const Allocations& allocations, std::size_t alignment,
                              const std::string& case_name) {
  const OffsetPlan best = planOffsets(allocations, alignment);
  ASSERT_TRUE(isSoundPlan(allocations, best, alignment)) << case_name;
  std::size_t smallest = std::numeric_limits<std::size_t>::max();
  for (OffsetStrategy strategy : kAllOffsetStrategies) {
    const OffsetPlan plan = planOffsetsWith(allocations, strategy, alignment);
    ASSERT_TRUE(isSoundPlan(allocations, plan, alignment)) << case_name;
    ASSERT_EQ(plan.lower_bound, best.lower_bound) << case_name;
    smallest = std::min(smallest, plan.block_size);
  }
  ASSERT_EQ(best.block_size, smallest) << case_name;
}

std::string thrownMessage(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "<no std::invalid_argument>";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(AlignUpTest, RoundsToMultiples) {
  EXPECT_EQ(alignUp(0, 64), 0u);
  EXPECT_EQ(alignUp(1, 64), 64u);
  EXPECT_EQ(alignUp(64, 64), 64u);
  EXPECT_EQ(alignUp(65, 64), 128u);
  EXPECT_EQ(alignUp(7, 1), 7u);
}

TEST(AlignUpTest, RejectsBadAlignmentAndOverflow) {
  EXPECT_THROW(alignUp(8, 0), std::invalid_argument);
  EXPECT_THROW(alignUp(8, 48), std::invalid_argument);
  EXPECT_THROW(alignUp(std::numeric_limits<std::size_t>::max(), 64), std::invalid_argument);
}

TEST(LowerBoundTest, CountsInclusiveLifetimesAndAlignment) {
  // [0,5] and [5,9] are both live at event 5; [10,10] is alone.
  const Allocations allocations = {{100, 0, 5}, {1, 5, 9}, {100, 10, 10}};
  EXPECT_EQ(liveBytesLowerBound(allocations, 64), 128u + 64u);
  EXPECT_EQ(liveBytesLowerBound(allocations, 1), 100u + 1u);
  EXPECT_EQ(liveBytesLowerBound({}, 64), 0u);
}

TEST(LowerBoundTest, MatchesBruteForceOnRandomInputs) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    const Allocations allocations = randomIntervals(rng, 1 + rng() % 60, 50, rng() % 30);
    ASSERT_EQ(liveBytesLowerBound(allocations, alignment),
              bruteForceLowerBound(allocations, alignment))
        << "trial " << trial;
  }
}

TEST(InputValidationTest, RejectsLifetimeEndingBeforeItStarts) {
  const Allocations allocations = {{64, 0, 3}, {64, 1, 2}, {64, 9, 4}};
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { planOffsets(allocations); },
           [&] { planOffsetsWith(allocations, OffsetStrategy::kAllocationOrderTwoSided); },
           [&] { liveBytesLowerBound(allocations); },
           [&] { validatePlan(allocations, OffsetPlan{}); }}) {
    const std::string message = thrownMessage(call);
    EXPECT_TRUE(contains(message, "allocation 2")) << message;
    EXPECT_TRUE(contains(message, "last_use 4 is before first_use 9")) << message;
  }
}

TEST(InputValidationTest, RejectsAlignmentThatIsNotAPowerOfTwo) {
  const Allocations allocations = {{64, 0, 3}};
  for (std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{96}}) {
    const std::string message = thrownMessage([&] { planOffsets(allocations, alignment); });
    EXPECT_TRUE(contains(message, "power of two, got " + std::to_string(alignment))) << message;
    EXPECT_THROW(liveBytesLowerBound(allocations, alignment), std::invalid_argument);
    EXPECT_THROW(validatePlan(allocations, OffsetPlan{}, alignment), std::invalid_argument);
  }
}

TEST(InputValidationTest, RejectsSizesThatOverflowWhenAlignedOrSummed) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  const std::string aligned = thrownMessage([&] {
    planOffsets({{64, 0, 1}, {huge - 10, 0, 1}}, 64);
  });
  EXPECT_TRUE(contains(aligned, "allocation 1")) << aligned;
  const std::string summed = thrownMessage([&] {
    planOffsets({{huge / 2, 0, 1}, {huge / 2, 2, 3}, {64, 4, 5}}, 1);
  });
  EXPECT_TRUE(contains(summed, "allocation 2")) << summed;
}

TEST(OffsetPlannerTest, EmptyInputNeedsNoBlock) {
  const OffsetPlan plan = planOffsets({});
  EXPECT_TRUE(plan.offsets.empty());
  EXPECT_EQ(plan.block_size, 0u);
  EXPECT_EQ(plan.lower_bound, 0u);
  EXPECT_EQ(validatePlan({}, plan), "");
}

TEST(OffsetPlannerTest, ZeroSizeAllocationsOccupyNothing) {
  const Allocations only_empty = {{0, 0, 9}, {0, 3, 4}};
  const OffsetPlan empty_plan = planOffsets(only_empty);
  EXPECT_EQ(empty_plan.block_size, 0u);
  EXPECT_EQ(empty_plan.offsets, (std::vector<std::size_t>{0, 0}));

  const Allocations mixed = {{0, 0, 9}, {100, 0, 9}, {0, 2, 3}, {64, 1, 5}};
  const OffsetPlan plan = planOffsets(mixed);
  EXPECT_TRUE(isSoundPlan(mixed, plan, kDefaultAlignment));
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[2], 0u);
  EXPECT_EQ(plan.block_size, 128u + 64u);
}

TEST(OffsetPlannerTest, IsDeterministic) {
  std::mt19937_64 rng(11);
  const Allocations allocations = randomRecording(rng, 500, 40);
  const OffsetPlan first = planOffsets(allocations);
  const OffsetPlan second = planOffsets(allocations);
  EXPECT_EQ(first.offsets, second.offsets);
  EXPECT_EQ(first.block_size, second.block_size);
  EXPECT_STREQ(first.strategy, second.strategy);
}

TEST(OffsetPlannerTest, TriesOtherStrategiesWhereGreedyBySizeFallsShort) {
  // A chain where greedy-by-size places 10 and 9 at offset 0 first, leaving no hole for the
  // 5-byte tensor between them: 21 bytes, while ping-ponging the chain needs only 10 + 6 = 16.
  const Allocations chain = {{10, 0, 1}, {6, 1, 2}, {5, 2, 3}, {9, 3, 4}};
  const OffsetPlan greedy = planOffsetsWith(chain, OffsetStrategy::kGreedyBySizeBestFit, 1);
  EXPECT_EQ(greedy.block_size, 21u);
  const OffsetPlan best = planOffsets(chain, 1);
  EXPECT_EQ(best.lower_bound, 16u);
  EXPECT_EQ(best.block_size, 16u);
  EXPECT_TRUE(isSoundPlan(chain, best, 1));
}

TEST(ValidatePlanTest, AcceptsSharedBytesOnlyWhenLifetimesAreDisjoint) {
  const Allocations allocations = {{64, 0, 4}, {64, 5, 9}};
  OffsetPlan plan;
  plan.offsets = {0, 0};
  plan.block_size = 64;
  EXPECT_EQ(validatePlan(allocations, plan), "");
}

TEST(ValidatePlanTest, CatchesOverlappingPlan) {
  // Lifetimes are inclusive: freed at event 5 and allocated at event 5 still conflict.
  const Allocations allocations = {{64, 0, 3}, {64, 0, 5}, {64, 5, 9}};
  OffsetPlan plan;
  plan.offsets = {0, 64, 64};
  plan.block_size = 128;
  const std::string violation = validatePlan(allocations, plan);
  EXPECT_TRUE(contains(violation, "allocations 1 and 2 share bytes [64, 128)")) << violation;
  EXPECT_TRUE(contains(violation, "live at event 5")) << violation;
}

TEST(ValidatePlanTest, CatchesPartialByteOverlap) {
  const Allocations allocations = {{128, 0, 3}, {128, 2, 5}};
  OffsetPlan plan;
  plan.offsets = {64, 0};
  plan.block_size = 192;
  EXPECT_TRUE(contains(validatePlan(allocations, plan), "share bytes [64, 128)"));
  plan.offsets = {128, 0};  // adjacent, not overlapping
  plan.block_size = 256;
  EXPECT_EQ(validatePlan(allocations, plan), "");
}

TEST(ValidatePlanTest, CatchesMisalignmentOverrunAndWrongCount) {
  const Allocations allocations = {{64, 0, 3}, {100, 1, 2}};
  OffsetPlan plan;
  plan.offsets = {0, 32};
  plan.block_size = 256;
  EXPECT_TRUE(
      contains(validatePlan(allocations, plan), "allocation 1: offset 32 is not a multiple"));
  plan.offsets = {0, 64};
  plan.block_size = 128;  // allocation 1 needs [64, 192)
  EXPECT_TRUE(contains(validatePlan(allocations, plan), "extend past block_size 128"));
  plan.offsets = {std::numeric_limits<std::size_t>::max() - 63, 0};  // must not wrap around
  EXPECT_TRUE(contains(validatePlan(allocations, plan), "allocation 0"));
  plan.offsets = {0};
  EXPECT_TRUE(contains(validatePlan(allocations, plan), "plan has 1 offsets for 2 allocations"));
}

TEST(ValidatePlanTest, AgreesWithBruteForceOnRandomPlans) {
  // Random offsets on a coarse grid make roughly half of these plans invalid, so both the
  // "valid" and the "invalid" answers are exercised.
  std::mt19937_64 rng(3);
  int invalid = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    Allocations allocations = randomIntervals(rng, 1 + rng() % 12, 20, rng() % 8);
    for (PlannedAllocation& allocation : allocations) allocation.size %= 3 * alignment;
    OffsetPlan plan;
    for (std::size_t i = 0; i < allocations.size(); ++i) {
      plan.offsets.push_back(alignment * (rng() % 8) + (rng() % 40 == 0 ? 1 : 0));
    }
    plan.block_size = alignment * (4 + rng() % 8);
    const bool valid = bruteForceIsValid(allocations, plan, alignment);
    invalid += valid ? 0 : 1;
    ASSERT_EQ(validatePlan(allocations, plan, alignment).empty(), valid) << "trial " << trial;
  }
  EXPECT_GT(invalid, 300);
  EXPECT_LT(invalid, 2700);
}

TEST(ValidatePlanTest, CatchesCorruptedPlannerOutput) {
  // Move one allocation onto a lifetime-overlapping neighbour: the checker must notice even in a
  // large plan produced by the planner itself.
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const Allocations allocations = randomRecording(rng, 400, 30);
    OffsetPlan plan = planOffsets(allocations);
    ASSERT_EQ(validatePlan(allocations, plan), "");
    bool corrupted = false;
    for (std::size_t i = 0; i < allocations.size() && !corrupted; ++i) {
      for (std::size_t j = i + 1; j < allocations.size() && !corrupted; ++j) {
        if (allocations[i].size > 0 && allocations[j].size > 0 &&
            lifetimesOverlap(allocations[i], allocations[j])) {
          plan.offsets[j] = plan.offsets[i];
          plan.block_size =
              std::max(plan.block_size, plan.offsets[j] + alignedSize(allocations[j].size, 64));
          corrupted = true;
        }
      }
    }
    ASSERT_TRUE(corrupted);
    EXPECT_TRUE(contains(validatePlan(allocations, plan), "share bytes")) << "trial " << trial;
  }
}

TEST(OffsetPlannerPropertyTest, RandomRecordingsGiveSoundPlans) {
  std::mt19937_64 rng(20240601);
  for (int trial = 0; trial < 1200; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    const Allocations allocations = randomRecording(rng, 1 + rng() % 100, 2 + rng() % 40);
    expectEveryStrategySound(allocations, alignment, "recording trial " + std::to_string(trial));
    ASSERT_EQ(planOffsets(allocations, alignment).lower_bound,
              bruteForceLowerBound(allocations, alignment));
    if (HasFatalFailure()) return;
  }
}

TEST(OffsetPlannerPropertyTest, RandomIntervalsGiveSoundPlans) {
  // From sparse (mostly disjoint) to dense (nearly everything overlaps) lifetimes.
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 800; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    const auto horizon = static_cast<std::uint32_t>(1 + rng() % 200);
    const auto max_length = static_cast<std::uint32_t>(rng() % 100);
    const Allocations allocations = randomIntervals(rng, 1 + rng() % 100, horizon, max_length);
    expectEveryStrategySound(allocations, alignment, "interval trial " + std::to_string(trial));
    if (HasFatalFailure()) return;
  }
}

TEST(OffsetPlannerPropertyTest, HeavyOverlapMixedWithShortLifetimes) {
  // Long-lived allocations push the placer past its neighbour limit onto the offset-order scan,
  // interleaved with short ones that stay on the segment-tree path.
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 2; ++trial) {
    Allocations allocations = randomRecording(rng, 1200, 8);
    const std::uint32_t horizon = allocations.empty() ? 1 : allocations.back().last_use + 1;
    for (int i = 0; i < 250; ++i) {
      const auto first = static_cast<std::uint32_t>(rng() % (horizon / 4 + 1));
      allocations.push_back({randomSize(rng), first, horizon - first});
    }
    std::shuffle(allocations.begin(), allocations.end(), rng);
    expectEveryStrategySound(allocations, 64, "mixed trial " + std::to_string(trial));
  }
}

TEST(OffsetPlannerPropertyTest, TwentyThousandAllocationsGiveSoundPlan) {
  std::mt19937_64 rng(2020);
  const Allocations allocations = randomRecording(rng, 20000, 50);
  const OffsetPlan plan = planOffsets(allocations);
  EXPECT_TRUE(isSoundPlan(allocations, plan, kDefaultAlignment));
}

// Families where the optimum equals the lower bound and the planner must reach it exactly.

TEST(OffsetPlannerOptimalityTest, DisjointLifetimesNeedOnlyTheLargest) {
  // No allocation ever has a placed neighbour, so every strategy puts each at offset 0.
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    Allocations allocations;
    std::size_t largest = 0;
    for (std::uint32_t i = 0; i < 1 + rng() % 100; ++i) {
      allocations.push_back({randomSize(rng), 2 * i, 2 * i + 1});
      largest = std::max(largest, alignedSize(allocations.back().size, 64));
    }
    std::shuffle(allocations.begin(), allocations.end(), rng);
    for (OffsetStrategy strategy : kAllOffsetStrategies) {
      const OffsetPlan plan = planOffsetsWith(allocations, strategy);
      ASSERT_TRUE(isSoundPlan(allocations, plan, 64));
      ASSERT_EQ(plan.block_size, largest) << plan.strategy;
    }
  }
}

TEST(OffsetPlannerOptimalityTest, StrictStackReachesLowerBound) {
  // In allocation order, an allocation's placed neighbours are exactly its enclosing
  // allocations (lifetimes are nested or disjoint). By induction they sit packed against the
  // ends of the block with one hole between, of size lower_bound minus their total, which fits
  // the new allocation because it and its ancestors are all live at its first event.
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    const Allocations allocations = randomStack(rng, 1 + rng() % 150);
    for (OffsetStrategy strategy :
         {OffsetStrategy::kAllocationOrderBestFit, OffsetStrategy::kAllocationOrderTwoSided}) {
      const OffsetPlan plan = planOffsetsWith(allocations, strategy, alignment);
      ASSERT_TRUE(isSoundPlan(allocations, plan, alignment));
      ASSERT_EQ(plan.block_size, plan.lower_bound) << plan.strategy << " trial " << trial;
    }
    ASSERT_EQ(planOffsets(allocations, alignment).block_size,
              liveBytesLowerBound(allocations, alignment));
  }
}

TEST(OffsetPlannerOptimalityTest, EqualSizesOnIntervalsReachLowerBound) {
  // Interval-graph colouring: with one size s, every offset stays a multiple of s. Placed in
  // first-use order, an allocation's placed neighbours are all live at its first event, so if
  // they left no free slot below the top it goes on top, and the slot count never exceeds the
  // most allocations live at once. Greedy-by-size breaks its all-equal ties by first use, so it
  // is the same order.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    Allocations allocations = randomIntervals(rng, 1 + rng() % 150, 1 + rng() % 100,
                                              static_cast<std::uint32_t>(rng() % 40));
    const std::size_t size = 1 + rng() % 5000;
    for (PlannedAllocation& allocation : allocations) allocation.size = size;
    for (OffsetStrategy strategy :
         {OffsetStrategy::kAllocationOrderBestFit, OffsetStrategy::kAllocationOrderTwoSided,
          OffsetStrategy::kGreedyBySizeBestFit}) {
      const OffsetPlan plan = planOffsetsWith(allocations, strategy, alignment);
      ASSERT_TRUE(isSoundPlan(allocations, plan, alignment));
      ASSERT_EQ(plan.block_size, plan.lower_bound) << plan.strategy << " trial " << trial;
    }
    ASSERT_EQ(planOffsets(allocations, alignment).block_size,
              liveBytesLowerBound(allocations, alignment));
  }
}

TEST(OffsetPlannerOptimalityTest, ConvNetChainReachesLowerBound) {
  // The optimum is the largest producer+consumer pair, reached by alternating tensors between
  // the bottom and the top of the block. The two-sided strategy does exactly that in
  // allocation order: each tensor's only placed neighbour is its producer's input, sitting at
  // one end, so the tensor goes flush against the other end, and the pair fits in lower_bound.
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t alignment = kAlignments[trial % 4];
    const Allocations allocations = randomChain(rng, 1 + rng() % 200);
    const OffsetPlan plan =
        planOffsetsWith(allocations, OffsetStrategy::kAllocationOrderTwoSided, alignment);
    ASSERT_TRUE(isSoundPlan(allocations, plan, alignment));
    ASSERT_EQ(plan.block_size, plan.lower_bound) << "trial " << trial;
    ASSERT_EQ(planOffsets(allocations, alignment).block_size, plan.lower_bound);
  }
}

TEST(OffsetPlannerOptimalityTest, EverythingLiveAtOnceNeedsTheNaiveSum) {
  // One event where all allocations are live forces lower_bound == naive_sum, and no sound plan
  // exceeds naive_sum. 3000 mutual neighbours also drive the placer's O(n^2) scan path.
  std::mt19937_64 rng(5);
  Allocations allocations;
  for (int i = 0; i < 3000; ++i) {
    allocations.push_back({randomSize(rng), static_cast<std::uint32_t>(rng() % 50),
                           static_cast<std::uint32_t>(50 + rng() % 50)});
  }
  for (OffsetStrategy strategy : kAllOffsetStrategies) {
    const OffsetPlan plan = planOffsetsWith(allocations, strategy);
    ASSERT_TRUE(isSoundPlan(allocations, plan, 64));
    EXPECT_EQ(plan.lower_bound, plan.naive_sum);
    EXPECT_EQ(plan.block_size, plan.naive_sum) << plan.strategy;
  }
}

}  // namespace
}  // namespace memseal::plan
