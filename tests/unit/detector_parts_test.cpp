// Parts of the leak detector that decide alone: when its verdict is renewed
// (detect/verdict_renewals.h), its records of the steps (detect/step_records.h) and when the
// findings of build-ups are made again (detect/built_findings.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "detect/built_findings.h"
#include "detect/step_records.h"
#include "detect/verdict_renewals.h"

namespace memseal::detect {
namespace {

VerdictRenewals::Boundary at(std::int64_t live_bytes, std::int64_t resident_high = 0) {
  VerdictRenewals::Boundary boundary;
  boundary.sample.live_bytes = live_bytes;
  boundary.sample.live_count = 1;
  boundary.resident_high = resident_high;
  return boundary;
}

constexpr std::int64_t kMs = 1000000;

TEST(VerdictRenewals, EveryBoundaryWhileAVerdictFormsThenEveryEighthWhileMemoryMoves) {
  VerdictRenewals renewals;
  std::int64_t now = 0;
  EXPECT_TRUE(renewals.due(at(100), 1, /*forming=*/true, now));
  renewals.noteRenewal(at(100), 1, false, now, now + 1000);
  // Memory moved since, up and down: renewed every 8 boundaries, whatever the time.
  for (std::uint32_t step = 2; step < 9; ++step) {
    EXPECT_FALSE(renewals.due(at(step % 2 == 0 ? 90 : 110), step, false, now)) << step;
  }
  EXPECT_TRUE(renewals.due(at(90), 9, false, now));
}

TEST(VerdictRenewals, MemoryThatKeepsRisingIsRenewedBeforeTheStride) {
  VerdictRenewals renewals;
  std::int64_t now = 0;
  renewals.noteRenewal(at(100), 1, false, now, now + 1000);
  // Three boundaries above the one before them: not yet. A pass's first step may hold more than
  // the rest, which then build up below it: a rise counts though it is no new high.
  EXPECT_FALSE(renewals.due(at(110), 2, false, now));
  EXPECT_FALSE(renewals.due(at(105), 3, false, now));  // a dip
  EXPECT_FALSE(renewals.due(at(108), 4, false, now));
  EXPECT_FALSE(renewals.due(at(108), 5, false, now));  // as much, not more
  EXPECT_FALSE(renewals.due(at(109), 6, false, now));
  // The fourth rise renews the verdict, two boundaries before the stride would have.
  EXPECT_TRUE(renewals.due(at(110), 7, false, now));
  // Counted again from the renewal.
  renewals.noteRenewal(at(140), 7, false, now, now + 1000);
  for (std::uint32_t step = 8; step < 11; ++step) {
    EXPECT_FALSE(renewals.due(at(140 + step), step, false, now)) << step;
  }
  EXPECT_TRUE(renewals.due(at(200), 11, false, now));
}

TEST(VerdictRenewals, BoundariesThatLookAlikeRenewAsTheCostAllows) {
  VerdictRenewals renewals;
  std::int64_t now = 0;
  renewals.noteRenewal(at(100, 50), 1, false, now, now + kMs);  // a renewal cost 1 ms
  // Nothing moved: not at the least stride, only once 512 times the cost has passed ...
  EXPECT_FALSE(renewals.due(at(100, 50), 9, false, now + 2 * kMs));
  EXPECT_TRUE(renewals.due(at(100, 50), 10, false, now + 600 * kMs));
  // ... or at the most stride, 64 boundaries on.
  renewals.noteRenewal(at(100, 50), 10, false, now, now + kMs);
  EXPECT_FALSE(renewals.due(at(100, 50), 73, false, now + 2 * kMs));
  EXPECT_TRUE(renewals.due(at(100, 50), 74, false, now + 2 * kMs));
  // Resident memory above its highest at the last renewal is movement: back to every 8th.
  renewals.noteRenewal(at(100, 50), 74, false, now, now + kMs);
  EXPECT_TRUE(renewals.due(at(100, 60), 82, false, now + 2 * kMs));
  // So is a renewal that suspected graphs, and any CUDA allocator's events.
  renewals.noteRenewal(at(100, 60), 82, /*graphs_suspected=*/true, now, now + kMs);
  EXPECT_TRUE(renewals.due(at(100, 60), 90, false, now + 2 * kMs));
  renewals.noteRenewal(at(100, 60), 90, false, now, now + kMs);
  VerdictRenewals::Boundary cuda = at(100, 60);
  cuda.device_events_seen = true;
  EXPECT_TRUE(renewals.due(cuda, 98, false, now + 2 * kMs));
}

TEST(VerdictRenewals, ANewTrackedHighIsOneAboveEveryRenewalSinceTheFirst) {
  VerdictRenewals renewals;
  EXPECT_FALSE(renewals.newTrackedHigh(500));  // the first only sets the mark
  EXPECT_FALSE(renewals.newTrackedHigh(400));
  EXPECT_FALSE(renewals.newTrackedHigh(500));
  EXPECT_TRUE(renewals.newTrackedHigh(501));
  EXPECT_FALSE(renewals.newTrackedHigh(501));
}

StepSample sample(std::uint32_t step) {
  StepSample s;
  s.step = step;
  s.live_bytes = 1000 + step;
  return s;
}

TEST(StepRecords, GraphNodesCarryOverAndTheRecordsStayBoundedWithoutReallocating) {
  StepRecords records;
  records.add(sample(0));
  records.setGraphNodesAlive(7);
  records.add(sample(1));
  ASSERT_EQ(records.perStep().size(), 2u);
  EXPECT_EQ(records.perStep()[1].graph_nodes_alive, 7);
  const StepSample* first = records.perStep().data();
  for (std::uint32_t step = 2; step < 3 * StepRecords::kMaxStepSamples; ++step) {
    records.add(sample(step));
  }
  EXPECT_LE(records.perStep().size(), StepRecords::kMaxStepSamples);
  EXPECT_EQ(records.perStep().data(), first);  // thinned in place
  EXPECT_EQ(records.perStep().back().step, 3 * StepRecords::kMaxStepSamples - 1);
}

TEST(StepRecords, ResidentMemoryIsReadWhileAVerdictFormsAndCarriedOverOtherwise) {
  StepRecords records;
  StepSample first = sample(0);
  records.readResidentMemory(first, 0, /*forming=*/true, false);
  ASSERT_EQ(records.residentReadings().size(), 1u);
  if (first.resident_bytes == 0) GTEST_SKIP() << "no /proc/self/statm here";
  EXPECT_EQ(records.residentHigh(), first.resident_bytes);
  // Not forming, at a time long before the last read ended (as if no time had passed): the
  // schedule carries the reading over.
  StepSample second = sample(1);
  records.readResidentMemory(second, 1, false, false);
  EXPECT_EQ(records.residentReadings().size(), 1u);
  EXPECT_EQ(second.resident_bytes, first.resident_bytes);
  EXPECT_EQ(records.residentGrowth(1, 1), 0);  // one reading: no growth to tell
}

TEST(BuiltFindings, NeededOnceABuildUpGrowsThatNoFindingHoldsYet) {
  BuiltFindings built;
  LeakEvidence evidence;
  GroupAtBoundary group;
  group.grows = false;
  group.judged_steps = 10;
  evidence.groups.push_back(group);
  EXPECT_FALSE(built.needed(evidence));  // nothing grows
  evidence.groups[0].grows = true;
  EXPECT_TRUE(built.needed(evidence));  // grows, no finding holds it yet
}

}  // namespace
}  // namespace memseal::detect
