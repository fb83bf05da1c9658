// The CUDA ledger on synthetic allocator event streams, including streams it cannot fully match,
// and the ring the allocator's hooks write to.
#include "track/device_ledger.h"
#include "track/device_event_ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "device_replay.h"

namespace memseal {
namespace {

using namespace track;   // NOLINT: the ledger, its events and samples
using namespace detect;  // NOLINT: the diagnosis
using namespace test;    // NOLINT: the replay

TEST(DeviceMemoryLedger, UnmatchedEventsAreCountedNeverNegative) {
  Replay replay;
  replay.send(DeviceEventKind::kBlockFreeRequested, 0x500, 64);  // 1: unknown block
  replay.send(DeviceEventKind::kBlockFreeCompleted, 0x600, 64);  // 2: unknown block
  replay.alloc(0x9000, 4096);                                    // 3: outside any segment
  EXPECT_EQ(replay.totals().allocated, 4096u);
  replay.free(0x9000);  // matches the block it kept
  EXPECT_EQ(replay.totals().allocated, 0u);
  replay.send(DeviceEventKind::kBlockFreeCompleted, 0x9000, 4096);  // 4: freed twice
  replay.releaseSegment(0x1234);                                    // 5: unknown segment
  replay.segment(kBase, kMiB);
  replay.alloc(kBase, 4096);
  replay.alloc(kBase + 2048, 4096);  // 6: on top of a live block whose free was lost
  EXPECT_EQ(replay.totals().allocated, 4096u);
  EXPECT_EQ(replay.totals().live_blocks, 1u);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase + 2048, 0);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase + 2048, 0);  // 7: requested twice
  EXPECT_EQ(replay.totals().pending_free_bytes, 4096u);
  replay.releaseSegment(kBase);    // 8: a block still inside
  replay.alloc(kBase, 0);          // 9: empty
  replay.alloc(~0ull - 10, 4096);  // 10: wraps around
  replay.unmap(kBase, kMiB);       // 11: nothing mapped there
  replay.endStep();

  DeviceMemoryTotals totals = replay.totals();
  EXPECT_EQ(totals.unmatched_events, 11u);
  EXPECT_EQ(replay.ledger.unmatchedEvents(), 11u);
  EXPECT_EQ(totals.allocated, 0u);
  EXPECT_EQ(totals.pending_free_bytes, 0u);
  EXPECT_EQ(totals.reserved, 0u);
  EXPECT_EQ(totals.live_blocks, 0u);
  EXPECT_EQ(totals.segments, 0u);
  EXPECT_EQ(totals.peak_allocated, 4096u);  // the stale block left before the new one came
  FreeSpace space = replay.ledger.freeSpace(0);
  EXPECT_EQ(space.largest_free_extent, 0u);
  EXPECT_EQ(space.inactive_split_bytes, 0u);
  EXPECT_EQ(replay.ledger.stepSamples(0).back().allocated, 0u);
}

TEST(DeviceMemoryLedger, SegmentsTheAllocatorHadBeforeItsEventsAreSeededWithTheirBlocks) {
  Replay replay;
  // An event that came before the seeding: its segment is known, so the seed of it is skipped.
  replay.segment(kBase + 8 * kMiB, 2 * kMiB);
  replay.alloc(kBase + 8 * kMiB, 4096);
  DeviceSegmentSeed made_before{0, kBase, 2 * kMiB,
                                0, false, {{kBase, 4096}, {kBase + kMiB, 8192}}};
  DeviceSegmentSeed already_known{0,     kBase + 8 * kMiB,          2 * kMiB, 0,
                                  false, {{kBase + 8 * kMiB, 4096}}};
  DeviceSegmentSeed empty{0, 0, 0, 0, false, {}};
  for (const DeviceSegmentSeed& seed : {made_before, already_known, empty})
    replay.ledger.seed(seed);
  DeviceMemoryTotals totals = replay.totals();
  EXPECT_EQ(totals.reserved, 4 * kMiB);
  EXPECT_EQ(totals.allocated, 4096u + 8192u + 4096u);
  EXPECT_EQ(totals.segments, 2u);
  EXPECT_EQ(totals.segment_allocs, 1u);  // seeding is no event
  // The blocks made before the events came are freed like any other, and their segment goes.
  replay.free(kBase);
  replay.free(kBase + kMiB);
  replay.releaseSegment(kBase);
  totals = replay.totals();
  EXPECT_EQ(totals.allocated, 4096u);
  EXPECT_EQ(totals.reserved, 2 * kMiB);
  EXPECT_EQ(totals.unmatched_events, 0u);
  // The viewer's segments hold every block.
  std::vector<LiveSegment> segments = replay.ledger.liveSegments(0);
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].address, kBase + 8 * kMiB);
}

TEST(DeviceMemoryLedger, ExpandableSegmentsMapAndUnmapChangeReserved) {
  Replay replay;
  replay.map(kBase, 2 * kMiB);
  replay.map(kBase + 2 * kMiB, 4 * kMiB);  // grows in place: one segment
  EXPECT_EQ(replay.totals().reserved, 6 * kMiB);
  EXPECT_EQ(replay.totals().segments, 1u);
  replay.alloc(kBase, 3 * kMiB);  // spans two mappings
  EXPECT_EQ(replay.totals().unmatched_events, 0u);
  FreeSpace split = replay.ledger.freeSpace(0);
  EXPECT_EQ(split.largest_free_extent, 3 * kMiB);
  EXPECT_EQ(split.inactive_split_blocks, 1u);
  replay.free(kBase);
  replay.unmap(kBase + 2 * kMiB, 2 * kMiB);  // from the middle: two segments remain
  EXPECT_EQ(replay.totals().reserved, 4 * kMiB);
  EXPECT_EQ(replay.totals().segments, 2u);
  EXPECT_EQ(replay.totals().peak_reserved, 6 * kMiB);
  FreeSpace space = replay.ledger.freeSpace(0);
  EXPECT_EQ(space.largest_free_extent, 2 * kMiB);
  EXPECT_EQ(space.free_segments, 2u);
  EXPECT_EQ(space.free_segment_bytes, 4 * kMiB);
  replay.unmap(kBase, 2 * kMiB);
  replay.unmap(kBase + 4 * kMiB, 2 * kMiB);
  EXPECT_EQ(replay.totals().reserved, 0u);
  EXPECT_EQ(replay.totals().segment_frees, 3u);
  EXPECT_EQ(replay.totals().unmatched_events, 0u);
}

TEST(DeviceMemoryLedger, ABlockFreedButInUseByAStreamStillOccupiesItsSegment) {
  Replay replay;
  replay.segment(kBase, 4 * kMiB);
  replay.alloc(kBase, 4 * kMiB, /*site=*/1, /*stream=*/0);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase, 0);
  EXPECT_EQ(replay.totals().allocated, 0u);
  EXPECT_EQ(replay.totals().pending_free_bytes, 4 * kMiB);
  EXPECT_EQ(replay.ledger.freeSpace(0).largest_free_extent, 0u);
  EXPECT_TRUE(replay.ledger.liveBlocksBySite(0).empty());
  replay.send(DeviceEventKind::kBlockFreeCompleted, kBase, 0);
  EXPECT_EQ(replay.totals().pending_free_bytes, 0u);
  EXPECT_EQ(replay.ledger.freeSpace(0).largest_free_extent, 4 * kMiB);
}

// The ledger keeps the block the last event found, for the free's second event: a block that
// goes in between (evicted by a block made on top of it, or a ledger started again) must not be
// found there.
TEST(DeviceMemoryLedger, ABlockGoneBetweenTheTwoEventsOfItsFreeIsNotFoundAgain) {
  Replay replay;
  replay.segment(kBase, 4 * kMiB);
  replay.alloc(kBase, kMiB, /*site=*/1);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase, 0);
  replay.alloc(kBase, 2 * kMiB, /*site=*/2);  // its completion was never seen
  EXPECT_EQ(replay.totals().unmatched_events, 1u);
  EXPECT_EQ(replay.totals().pending_free_bytes, 0u);
  EXPECT_EQ(replay.totals().allocated, 2 * kMiB);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase, 0);
  replay.send(DeviceEventKind::kBlockFreeCompleted, kBase, 0);
  EXPECT_EQ(replay.totals().pending_free_bytes, 0u);
  replay.send(DeviceEventKind::kBlockFreeCompleted, kBase, 0);  // nothing left there
  EXPECT_EQ(replay.totals().unmatched_events, 2u);

  replay.alloc(kBase + kMiB, kMiB, /*site=*/3);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase + kMiB, 0);
  replay.ledger = DeviceMemoryLedger();  // a session starts: the ledger starts empty
  replay.send(DeviceEventKind::kBlockFreeCompleted, kBase + kMiB, 0);
  EXPECT_EQ(replay.totals().unmatched_events, 1u);
  EXPECT_EQ(replay.totals().live_blocks, 0u);
}

TEST(DeviceMemoryLedger, DevicesAreKeptApart) {
  Replay replay;
  replay.segment(kBase, 2 * kMiB);
  replay.alloc(kBase, kMiB);
  replay.device = 1;
  replay.segment(kBase, 8 * kMiB);  // same address, another device
  replay.endStep();
  EXPECT_EQ(replay.ledger.devices(), (std::vector<int>{0, 1}));
  EXPECT_EQ(replay.ledger.totals(0).reserved, 2 * kMiB);
  EXPECT_EQ(replay.ledger.totals(1).reserved, 8 * kMiB);
  EXPECT_EQ(replay.ledger.totals(1).allocated, 0u);
  EXPECT_EQ(replay.ledger.stepSamples(0).size(), 1u);
  EXPECT_EQ(replay.ledger.stepSamples(1).back().largest_free_extent, 8 * kMiB);
  EXPECT_EQ(replay.ledger.unmatchedEvents(), 0u);
  EXPECT_TRUE(replay.ledger.stepSamples(5).empty());
}

TEST(DeviceMemoryLedger, StepSamplesAreThinnedButKeepTheLatest) {
  Replay replay;
  replay.segment(kBase, kMiB);
  for (std::uint32_t i = 0; i < 20000; ++i) replay.endStep();
  const std::vector<DeviceStepSample>& samples = replay.ledger.stepSamples(0);
  EXPECT_LE(samples.size(), kMaxDeviceStepSamples);
  EXPECT_EQ(samples.front().step, 0u);
  EXPECT_EQ(samples.back().step, 19999u);
  for (std::size_t i = 1; i < samples.size(); ++i) ASSERT_LT(samples[i - 1].step, samples[i].step);
}

TEST(DeviceMemoryLedger, LiveSegmentsHoldTheirBlocksByAddress) {
  Replay replay;
  replay.segment(kBase, 20 * kMiB, /*stream=*/7);
  replay.alloc(kBase + 4 * kMiB, kMiB, /*site=*/3, 7);
  replay.alloc(kBase, 2 * kMiB, /*site=*/2, 7);
  replay.send(DeviceEventKind::kBlockFreeRequested, kBase + 4 * kMiB, 0);  // still on a stream
  replay.map(kBase + 32 * kMiB, 2 * kMiB);
  replay.map(kBase + 34 * kMiB, 2 * kMiB);  // merges with the mapping before it
  replay.alloc(kBase + 32 * kMiB, 3 * kMiB, /*site=*/4);
  replay.alloc(kBase + 64 * kMiB, kMiB, /*site=*/9);  // outside every segment

  std::vector<LiveSegment> segments = replay.ledger.liveSegments(0);
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].address, kBase);
  EXPECT_EQ(segments[0].bytes, 20 * kMiB);
  EXPECT_EQ(segments[0].stream, 7u);
  EXPECT_FALSE(segments[0].expandable);
  ASSERT_EQ(segments[0].blocks.size(), 2u);
  EXPECT_EQ(segments[0].blocks[0].address, kBase);
  EXPECT_EQ(segments[0].blocks[0].site, 2u);
  EXPECT_FALSE(segments[0].blocks[0].free_requested);
  EXPECT_EQ(segments[0].blocks[1].address, kBase + 4 * kMiB);
  EXPECT_TRUE(segments[0].blocks[1].free_requested);

  EXPECT_EQ(segments[1].address, kBase + 32 * kMiB);
  EXPECT_EQ(segments[1].bytes, 4 * kMiB);
  EXPECT_TRUE(segments[1].expandable);
  ASSERT_EQ(segments[1].blocks.size(), 1u);
  EXPECT_EQ(segments[1].blocks[0].bytes, 3 * kMiB);

  // The block outside every segment comes as a segment of its own.
  EXPECT_EQ(segments[2].address, kBase + 64 * kMiB);
  EXPECT_EQ(segments[2].bytes, kMiB);
  EXPECT_EQ(segments[2].site, 9u);
  ASSERT_EQ(segments[2].blocks.size(), 1u);

  EXPECT_TRUE(replay.ledger.liveSegments(5).empty());
}

// Whatever order events come in (lost, repeated, overlapping, seeded late), every query stays
// inside what the ledger holds and no total wraps below zero.
TEST(DeviceMemoryLedger, RandomEventStreamsKeepItsInvariants) {
  std::mt19937_64 random(20261126);
  auto pick = [&](std::uint64_t n) { return random() % n; };
  for (int stream_index = 0; stream_index < 20; ++stream_index) {
    Replay replay;
    std::uint64_t bytes_ever = 0;
    for (int event = 0; event < 2000; ++event) {
      // Addresses on a coarse grid of a small range, so events keep meeting earlier ones.
      std::uint64_t address = kBase + pick(64) * (kMiB / 4);
      std::uint64_t bytes = (1 + pick(16)) * (kMiB / 8);
      bytes_ever += bytes;
      switch (pick(10)) {
        case 0:
          replay.segment(address, bytes * 4, pick(2));
          break;
        case 1:
          replay.releaseSegment(address);
          break;
        case 2:
          replay.map(address, bytes);
          break;
        case 3:
          replay.unmap(address, bytes);
          break;
        case 4:
          replay.free(address);
          break;
        case 5:
          replay.send(DeviceEventKind::kBlockFreeRequested, address, 0);
          break;
        case 6:
          replay.oom(bytes, pick(3) * kMiB);
          break;
        case 7: {
          DeviceSegmentSeed seed{
              0,       address,      bytes * 2,
              pick(2), pick(2) == 0, {{address, bytes / 2}, {address + bytes, bytes / 2}}};
          replay.ledger.seed(seed);
          bytes_ever += 2 * bytes;
          break;
        }
        default:
          replay.alloc(address, bytes, static_cast<std::uint32_t>(pick(4)), pick(2));
          break;
      }
      if (event % 50 == 0) replay.endStep();
      DeviceMemoryTotals totals = replay.totals();
      ASSERT_LE(totals.allocated + totals.pending_free_bytes, bytes_ever);
      ASSERT_LE(totals.reserved, 8 * bytes_ever);
      if (event % 25 != 0) continue;
      std::uint64_t in_blocks = 0;
      std::uint64_t previous_end = 0;
      for (const LiveSegment& segment : replay.ledger.liveSegments(0)) {
        ASSERT_GE(segment.address, previous_end);  // by address, never overlapping
        previous_end = segment.address + segment.bytes;
        for (const LiveBlockSummary& block : segment.blocks) {
          ASSERT_GE(block.address, segment.address);
          ASSERT_LE(block.address + block.bytes, previous_end);
          in_blocks += block.bytes;
        }
      }
      ASSERT_EQ(in_blocks, totals.allocated + totals.pending_free_bytes);
      FreeSpace space = replay.ledger.freeSpace(0);
      ASSERT_LE(space.largest_free_extent, totals.reserved);
      ASSERT_LE(space.inactive_split_bytes, totals.reserved);
      std::uint64_t by_site = 0;
      for (const LiveBlockGroup& group : replay.ledger.liveBlocksBySite(0)) by_site += group.bytes;
      ASSERT_LE(by_site, totals.allocated + totals.pending_free_bytes);
      ASSERT_LE(replay.ledger.largestLiveBlocks(0, 5).size(), 5u);
    }
  }
}

TEST(DeviceEventRing, KeepsTheNewestAndCountsTheRest) {
  track::DeviceEventRing ring(3);
  for (std::uint64_t i = 1; i <= 5; ++i) {
    DeviceMemoryEvent event;
    event.address = i;
    ring.push(event);
  }
  std::vector<DeviceMemoryEvent> kept = ring.events();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].address, 3u);
  EXPECT_EQ(kept[2].address, 5u);
  EXPECT_EQ(ring.dropped(), 2u);
  ring.clear();
  EXPECT_TRUE(ring.events().empty());
  EXPECT_EQ(ring.dropped(), 5u);
  DeviceMemoryEvent event;
  event.address = 6;
  ring.push(event);
  ASSERT_EQ(ring.events().size(), 1u);
  EXPECT_EQ(ring.events()[0].address, 6u);
}

TEST(DeviceEventRing, ARestartForgetsWhatItDroppedAndKeepsOrder) {
  track::EventRing<BlockHistoryEvent> ring(2);
  for (std::uint64_t i = 1; i <= 3; ++i) ring.push({i, 0, 0, 0, true});
  EXPECT_EQ(ring.dropped(), 1u);
  ring.restart();
  EXPECT_EQ(ring.dropped(), 0u);
  EXPECT_TRUE(ring.events().empty());
  for (std::uint64_t i = 7; i <= 9; ++i) ring.push({i, 0, 0, 0, true});
  std::vector<BlockHistoryEvent> kept = ring.events();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].address, 8u);
  EXPECT_EQ(kept[1].address, 9u);
  EXPECT_EQ(ring.dropped(), 1u);
}

}  // namespace
}  // namespace memseal
