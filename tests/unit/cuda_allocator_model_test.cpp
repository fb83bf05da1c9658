// The model of PyTorch's CUDA caching allocator (explain/cuda_allocator_model.h), on sequences
// whose result follows from the allocator's rules by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "explain/cuda_allocator_model.h"

namespace {

using memseal::explain::CudaAllocatorEvent;
using memseal::explain::CudaAllocatorModel;
using memseal::explain::CudaAllocatorSettings;
using memseal::explain::replayCudaAllocator;
using memseal::explain::roundedBlockSize;
using memseal::explain::segmentSize;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t GiB = 1024 * MiB;

CudaAllocatorSettings settings(const std::string& conf) {
  return CudaAllocatorSettings::parse(conf);
}

TEST(CudaAllocatorModel, SizesAreRoundedAsTheAllocatorRoundsThem) {
  CudaAllocatorSettings plain;
  EXPECT_EQ(roundedBlockSize(1, plain), 512u);
  EXPECT_EQ(roundedBlockSize(512, plain), 512u);
  EXPECT_EQ(roundedBlockSize(513, plain), 1024u);
  // Four divisions between 1 and 2 MiB: 1.3 MiB is rounded to 1.5 MiB; powers of two stay.
  CudaAllocatorSettings four = settings("roundup_power2_divisions:4");
  EXPECT_EQ(roundedBlockSize(13 * MiB / 10, four), 3 * MiB / 2);
  EXPECT_EQ(roundedBlockSize(4 * MiB, four), 4 * MiB);
  EXPECT_EQ(roundedBlockSize(1000, four), 1024u);  // too small to divide: to 512 bytes
  // Segments: 2 MiB for the small pool, 20 MiB below 10 MiB, else the size rounded to 2 MiB.
  EXPECT_EQ(segmentSize(MiB), 2 * MiB);
  EXPECT_EQ(segmentSize(MiB + 512), 20 * MiB);
  EXPECT_EQ(segmentSize(10 * MiB), 10 * MiB);
  EXPECT_EQ(segmentSize(11 * MiB + 1), 12 * MiB);
}

TEST(CudaAllocatorModel, SmallBlocksShareTwoMebibyteSegmentsOfTheirStream) {
  CudaAllocatorModel model(CudaAllocatorSettings{}, GiB);
  for (std::uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(model.allocate(id, 512 * KiB, 0));
  EXPECT_EQ(model.reserved(), 2 * MiB);
  ASSERT_TRUE(model.allocate(4, 512 * KiB, 0));
  EXPECT_EQ(model.reserved(), 4 * MiB);
  // A block cached for one stream is not another's.
  model.free(4);
  ASSERT_TRUE(model.allocate(5, 512 * KiB, 1));
  EXPECT_EQ(model.reserved(), 6 * MiB);
  EXPECT_EQ(model.allocated(), 5 * 512 * KiB);
}

TEST(CudaAllocatorModel, ALargeSegmentIsSplitWhileMoreThanOneMebibyteRemains) {
  CudaAllocatorModel model(CudaAllocatorSettings{}, GiB);
  // 3 MiB blocks from 20 MiB segments: six fit in one (2 MiB remain, split off and cached).
  for (std::uint64_t id = 0; id < 6; ++id) ASSERT_TRUE(model.allocate(id, 3 * MiB, 0));
  EXPECT_EQ(model.reserved(), 20 * MiB);
  EXPECT_EQ(model.state().largest_free_block, 2 * MiB);
  ASSERT_TRUE(model.allocate(6, 3 * MiB, 0));
  EXPECT_EQ(model.reserved(), 40 * MiB);
  // 11 MiB fits the second segment's 17 MiB left, split again.
  ASSERT_TRUE(model.allocate(7, 11 * MiB, 0));
  EXPECT_EQ(model.reserved(), 40 * MiB);
  EXPECT_EQ(model.state().largest_free_block, 6 * MiB);
  // 11 MiB from a new 12 MiB segment: the 1 MiB left is not split off, the block holds it.
  CudaAllocatorModel fresh(CudaAllocatorSettings{}, GiB);
  ASSERT_TRUE(fresh.allocate(0, 11 * MiB, 0));
  EXPECT_EQ(fresh.reserved(), 12 * MiB);
  EXPECT_EQ(fresh.allocated(), 12 * MiB);
}

TEST(CudaAllocatorModel, FreedNeighboursMergeAndAWholeSegmentGoesBackOnEmptyCache) {
  CudaAllocatorModel model(CudaAllocatorSettings{}, GiB);
  for (std::uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(model.allocate(id, 5 * MiB, 0));
  EXPECT_EQ(model.reserved(), 20 * MiB);
  model.free(0);
  model.free(2);
  EXPECT_EQ(model.state().largest_free_block, 5 * MiB);
  model.emptyCache();  // the segment is still in use: nothing goes back
  EXPECT_EQ(model.reserved(), 20 * MiB);
  model.free(1);  // 0, 1 and 2 merge
  EXPECT_EQ(model.state().largest_free_block, 15 * MiB);
  ASSERT_TRUE(model.allocate(4, 14 * MiB, 0));  // fits the merged block
  EXPECT_EQ(model.reserved(), 20 * MiB);
  model.free(4);
  model.free(3);
  model.emptyCache();
  EXPECT_EQ(model.reserved(), 0u);
  EXPECT_EQ(model.state().segments, 0u);
}

// Half of every segment free, in pieces too small for the next request and in segments still in
// use: the "reserved but unallocated" out-of-memory error.
std::vector<CudaAllocatorEvent> fragmentingRun() {
  std::vector<CudaAllocatorEvent> events;
  for (std::uint64_t id = 0; id < 20; ++id) {
    events.push_back({CudaAllocatorEvent::Kind::kAlloc, id, 5 * MiB, 0});
  }
  for (std::uint64_t id = 0; id < 20; id += 2) {
    events.push_back({CudaAllocatorEvent::Kind::kFree, id, 0, 0});
  }
  events.push_back({CudaAllocatorEvent::Kind::kAlloc, 100, 10 * MiB, 0});
  return events;
}

TEST(CudaAllocatorModel, FragmentedCacheRunsOutWithHalfOfItsMemoryFree) {
  std::vector<CudaAllocatorEvent> events = fragmentingRun();
  auto replay = replayCudaAllocator(events, CudaAllocatorSettings{}, 100 * MiB);
  ASSERT_TRUE(replay.out_of_memory_at.has_value());
  EXPECT_EQ(*replay.out_of_memory_at, events.size() - 1);
  ASSERT_TRUE(replay.at_out_of_memory.has_value());
  EXPECT_EQ(replay.at_out_of_memory->reserved, 100 * MiB);
  EXPECT_EQ(replay.at_out_of_memory->allocated, 50 * MiB);
  EXPECT_EQ(replay.at_out_of_memory->largest_free_block, 5 * MiB);
  EXPECT_EQ(replay.cache_flushes, 1u);  // tried before giving up
  EXPECT_EQ(replay.reserved_peak, 100 * MiB);
  // With room for one more segment, it fits.
  auto roomier = replayCudaAllocator(events, CudaAllocatorSettings{}, 110 * MiB);
  EXPECT_FALSE(roomier.out_of_memory_at.has_value());
  EXPECT_EQ(roomier.reserved_peak, 110 * MiB);
}

TEST(CudaAllocatorModel, OversizeBlocksAreNeitherSplitNorGivenToSmallRequests) {
  std::vector<CudaAllocatorEvent> events = {
      {CudaAllocatorEvent::Kind::kAlloc, 1, 100 * MiB, 0},
      {CudaAllocatorEvent::Kind::kFree, 1, 0, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 2, 30 * MiB, 0},
  };
  // Without a limit, the cached 100 MiB block is split for the 30 MiB request.
  EXPECT_EQ(replayCudaAllocator(events, CudaAllocatorSettings{}, GiB).at_end.reserved, 100 * MiB);
  auto limited = replayCudaAllocator(events, settings("max_split_size_mb:64"), GiB);
  EXPECT_EQ(limited.at_end.reserved, 130 * MiB);
  // A large request takes an oversize block less than 20 MiB larger, whole.
  events.push_back({CudaAllocatorEvent::Kind::kAlloc, 3, 90 * MiB, 0});
  limited = replayCudaAllocator(events, settings("max_split_size_mb:64"), GiB);
  EXPECT_EQ(limited.at_end.reserved, 130 * MiB);
  EXPECT_EQ(limited.at_end.allocated, 130 * MiB);
}

TEST(CudaAllocatorModel, OversizeCachedBlocksAreFreedBeforeTheWholeCache) {
  std::vector<CudaAllocatorEvent> events = {
      {CudaAllocatorEvent::Kind::kAlloc, 1, 150 * MiB, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 2, 2 * MiB, 0},
      {CudaAllocatorEvent::Kind::kFree, 1, 0, 0},
      {CudaAllocatorEvent::Kind::kFree, 2, 0, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 3, 80 * MiB, 0},
  };
  // 150 MiB is more than 80 MiB + 20 MiB: not given; no room for a new 80 MiB segment beside it
  // in 200 MiB, so that oversize block alone goes back, and the 2 MiB request's segment stays.
  auto limited = replayCudaAllocator(events, settings("max_split_size_mb:64"), 200 * MiB);
  EXPECT_FALSE(limited.out_of_memory_at.has_value());
  EXPECT_EQ(limited.cache_flushes, 0u);
  EXPECT_EQ(limited.at_end.reserved, 100 * MiB);
  // Without the limit, the cached block is split: no new segment.
  auto plain = replayCudaAllocator(events, CudaAllocatorSettings{}, 200 * MiB);
  EXPECT_EQ(plain.at_end.reserved, 170 * MiB);
}

TEST(CudaAllocatorModel, GarbageCollectionFreesOldCachedBlocksOnlyUnderAMemoryFraction) {
  std::vector<CudaAllocatorEvent> events = {
      {CudaAllocatorEvent::Kind::kAlloc, 1, 40 * MiB, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 2, 40 * MiB, 0},
      {CudaAllocatorEvent::Kind::kFree, 1, 0, 0},
      {CudaAllocatorEvent::Kind::kFree, 2, 0, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 3, 60 * MiB, 0},
  };
  // 100 MiB allowed, collected above 50: 80 MiB reserved, both cached blocks as old, both freed.
  auto collected = replayCudaAllocator(
      events, settings("per_process_memory_fraction:0.5,garbage_collection_threshold:0.5"),
      200 * MiB);
  EXPECT_EQ(collected.cache_flushes, 0u);
  EXPECT_EQ(collected.at_end.reserved, 60 * MiB);
  // The same fraction without collection: the whole cache is flushed when the segment does not fit.
  auto flushed =
      replayCudaAllocator(events, settings("per_process_memory_fraction:0.5"), 200 * MiB);
  EXPECT_EQ(flushed.cache_flushes, 1u);
  EXPECT_EQ(flushed.at_end.reserved, 60 * MiB);
  // The threshold alone does nothing: the allocator collects only under a fraction.
  auto threshold_only =
      replayCudaAllocator(events, settings("garbage_collection_threshold:0.5"), 200 * MiB);
  EXPECT_EQ(threshold_only.at_end.reserved, 140 * MiB);
}

// A block split off a large cached segment pins it: the segment cannot go back, and the next
// larger request finds no room beside it.
std::vector<CudaAllocatorEvent> pinningRun() {
  return {
      {CudaAllocatorEvent::Kind::kAlloc, 1, 40 * MiB, 0},
      {CudaAllocatorEvent::Kind::kFree, 1, 0, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 2, 25 * MiB, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 3, 12 * MiB, 0},
      {CudaAllocatorEvent::Kind::kFree, 2, 0, 0},
      {CudaAllocatorEvent::Kind::kAlloc, 4, 30 * MiB, 0},
  };
}

TEST(CudaAllocatorModel, ExpandableSegmentsAvoidTheOutOfMemoryOfAPinnedSegment) {
  auto plain = replayCudaAllocator(pinningRun(), CudaAllocatorSettings{}, 60 * MiB);
  ASSERT_TRUE(plain.out_of_memory_at.has_value());
  EXPECT_EQ(*plain.out_of_memory_at, 5u);
  EXPECT_EQ(plain.at_out_of_memory->reserved, 40 * MiB);
  EXPECT_EQ(plain.at_out_of_memory->allocated, 12 * MiB);
  EXPECT_EQ(plain.at_out_of_memory->largest_free_block, 25 * MiB);
  // Expandable: the 40 MiB are two 20 MiB pages; trying, the free first page is unmapped, and
  // 40 MiB are mapped after the 12 MiB block, beside the free 3 MiB before them.
  auto expandable =
      replayCudaAllocator(pinningRun(), settings("expandable_segments:True"), 60 * MiB);
  EXPECT_FALSE(expandable.out_of_memory_at.has_value());
  EXPECT_EQ(expandable.cache_flushes, 1u);
  EXPECT_EQ(expandable.reserved_peak, 60 * MiB);
  EXPECT_EQ(expandable.at_end.allocated, 12 * MiB + 30 * MiB);
  // Five free mebibytes stay mapped after the unmapped page; 3 + 40 - 30 after the new block.
  EXPECT_EQ(expandable.at_end.largest_free_block, 13 * MiB);
}

// Each round frees a 200 MiB block and keeps a 120 MiB one carved from its segment: eight segments
// each keep an 80 MiB hole, and under 2 GiB the last 500 MiB find no room. max_split_size_mb keeps
// the 200 MiB block whole (the 120 MiB ones get segments of their own), and expandable segments
// grow one mapping past the holes.
std::vector<CudaAllocatorEvent> holeInEverySegmentRun() {
  using Kind = CudaAllocatorEvent::Kind;
  std::vector<CudaAllocatorEvent> events;
  std::uint64_t id = 0;
  for (int round = 0; round < 8; ++round) {
    events.push_back({Kind::kAlloc, ++id, 200 * MiB, 0});
    events.push_back({Kind::kFree, id, 0, 0});
    events.push_back({Kind::kAlloc, ++id, 120 * MiB, 0});
  }
  events.push_back({Kind::kAlloc, ++id, 500 * MiB, 0});
  return events;
}

TEST(CudaAllocatorModel, AHoleInEverySegmentRunsOutUnlessBlocksStayWholeOrSegmentsExpand) {
  const std::vector<CudaAllocatorEvent> events = holeInEverySegmentRun();
  auto plain = replayCudaAllocator(events, CudaAllocatorSettings{}, 2 * GiB);
  ASSERT_TRUE(plain.out_of_memory_at.has_value());
  EXPECT_EQ(*plain.out_of_memory_at, events.size() - 1);
  EXPECT_EQ(plain.at_out_of_memory->reserved, 1600 * MiB);
  EXPECT_EQ(plain.at_out_of_memory->allocated, 960 * MiB);
  EXPECT_EQ(plain.at_out_of_memory->largest_free_block, 80 * MiB);

  auto whole = replayCudaAllocator(events, settings("max_split_size_mb:128"), 2 * GiB);
  EXPECT_FALSE(whole.out_of_memory_at.has_value());
  EXPECT_EQ(whole.reserved_peak, 200 * MiB + 8 * 120 * MiB + 500 * MiB);

  auto expandable = replayCudaAllocator(events, settings("expandable_segments:True"), 2 * GiB);
  EXPECT_FALSE(expandable.out_of_memory_at.has_value());
  // One mapping: the first 200 MiB, 120 more each later round, then what the 500 MiB need past
  // the last hole.
  EXPECT_EQ(expandable.reserved_peak, 960 * MiB + 500 * MiB);
}

TEST(CudaAllocatorModel, ExpandableSegmentsMapPagesAsNeededAndUnmapThemOnEmptyCache) {
  CudaAllocatorModel model(settings("expandable_segments:True"), GiB);
  for (std::uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(model.allocate(id, 512 * KiB, 0));
  EXPECT_EQ(model.reserved(), 4 * MiB);  // two 2 MiB pages of one segment
  EXPECT_EQ(model.state().segments, 1u);
  ASSERT_TRUE(model.allocate(5, 5 * MiB, 0));  // the large pool's segment: one 20 MiB page
  EXPECT_EQ(model.reserved(), 24 * MiB);
  EXPECT_EQ(model.state().segments, 2u);
  ASSERT_TRUE(model.allocate(6, 18 * MiB, 0));  // 15 MiB free at the page's end, and one more page
  EXPECT_EQ(model.reserved(), 44 * MiB);
  EXPECT_EQ(model.allocated(), 5 * 512 * KiB + 23 * MiB);
  for (std::uint64_t id = 0; id < 7; ++id) model.free(id);
  EXPECT_EQ(model.reserved(), 44 * MiB);  // nothing is unmapped on free
  model.emptyCache();
  EXPECT_EQ(model.reserved(), 0u);
  EXPECT_EQ(model.state().segments, 0u);
}

TEST(CudaAllocatorSettings, ReadsTheAllocatorsSyntaxAndSaysItBack) {
  CudaAllocatorSettings read = settings(
      "max_split_size_mb:128, garbage_collection_threshold:0.8,expandable_segments:False,"
      "roundup_power2_divisions:[256:1,512:2,>:4],pinned_use_cuda_host_register:True");
  ASSERT_TRUE(read.max_split_size.has_value());
  EXPECT_EQ(*read.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(read.garbage_collection_threshold, 0.8);
  EXPECT_FALSE(read.expandable_segments);
  // Intervals below the first given take its divisions; > the rest.
  EXPECT_EQ(read.roundup_power2_divisions[0], 1u);
  EXPECT_EQ(read.roundup_power2_divisions[8], 1u);   // from 256 MiB
  EXPECT_EQ(read.roundup_power2_divisions[9], 2u);   // from 512 MiB
  EXPECT_EQ(read.roundup_power2_divisions[10], 4u);  // from 1 GiB on
  EXPECT_EQ(read.roundup_power2_divisions[15], 4u);
  CudaAllocatorSettings again = settings(read.text());
  EXPECT_EQ(again.max_split_size, read.max_split_size);
  EXPECT_EQ(again.roundup_power2_divisions, read.roundup_power2_divisions);
  EXPECT_DOUBLE_EQ(again.garbage_collection_threshold, read.garbage_collection_threshold);
  EXPECT_EQ(CudaAllocatorSettings{}.text(), "");
}

TEST(CudaAllocatorSettings, RefusesWhatTheAllocatorWouldNotTakeSayingWhy) {
  for (const char* conf :
       {"max_split_size_mb:19", "max_split_size_mb:abc", "roundup_power2_divisions:0",
        "garbage_collection_threshold:1.5", "expandable_segments:yes", "roundup_power2_divisions:3",
        "roundup_power2_divisions:[3:2]", "backend:cudaMallocAsync", "no_such_setting:1",
        "max_split_size_mb"}) {
    EXPECT_THROW(settings(conf), std::invalid_argument) << conf;
  }
  try {
    settings("max_split_size_mb:19");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("max_split_size_mb"), std::string::npos);
  }
}

}  // namespace
