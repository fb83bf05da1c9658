// The CUDA ledger and diagnosis on synthetic allocator event streams: leaks, caching and
// fragmentation told apart, out-of-memory forensics, and streams the ledger cannot fully match.
#include "detect/device_diagnosis.h"
#include "detect/device_summary.h"
#include "report/cuda_oom.h"
#include "track/device_event_ring.h"
#include "track/device_ledger.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>

namespace memseal {
namespace {

using namespace track;   // NOLINT: the ledger, its events and samples
using namespace detect;  // NOLINT: the diagnosis
using report::oomForensicsJson;
using report::oomForensicsText;

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kBase = 0x7f0000000000ull;

// Sends events the way the allocator's trace hooks would, numbering steps as it goes.
struct Replay {
  DeviceMemoryLedger ledger;
  std::uint32_t step = 0;
  int device = 0;

  void send(DeviceEventKind kind, std::uint64_t address, std::uint64_t bytes,
            std::uint32_t site = 0, std::uint64_t stream = 0, std::uint64_t device_free = 0) {
    DeviceMemoryEvent event;
    event.kind = kind;
    event.device = device;
    event.address = address;
    event.bytes = bytes;
    event.stream = stream;
    event.site = site;
    event.step = step;
    event.time_ns = static_cast<std::int64_t>(step) * 1000;
    event.device_free_bytes = device_free;
    ledger.apply(event);
  }
  void segment(std::uint64_t address, std::uint64_t bytes, std::uint64_t stream = 0) {
    send(DeviceEventKind::kSegmentAlloc, address, bytes, 0, stream);
  }
  void releaseSegment(std::uint64_t address) { send(DeviceEventKind::kSegmentFree, address, 0); }
  void map(std::uint64_t address, std::uint64_t bytes) {
    send(DeviceEventKind::kSegmentMap, address, bytes);
  }
  void unmap(std::uint64_t address, std::uint64_t bytes) {
    send(DeviceEventKind::kSegmentUnmap, address, bytes);
  }
  void alloc(std::uint64_t address, std::uint64_t bytes, std::uint32_t site = 0,
             std::uint64_t stream = 0) {
    send(DeviceEventKind::kBlockAlloc, address, bytes, site, stream);
  }
  void free(std::uint64_t address) {
    send(DeviceEventKind::kBlockFreeRequested, address, 0);
    send(DeviceEventKind::kBlockFreeCompleted, address, 0);
  }
  void oom(std::uint64_t requested, std::uint64_t device_free) {
    send(DeviceEventKind::kOutOfMemory, 0, requested, 0, 0, device_free);
  }
  void endStep() { ledger.endStep(step++); }
  DeviceMemoryTotals totals() const { return ledger.totals(device); }
  DeviceMemoryDiagnosis diagnose(std::uint32_t warmup) const {
    return diagnoseDevice(ledger.stepSamples(device), warmup, ledger.lastOom(device));
  }
};

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(DeviceMemoryDiagnosis, BlocksKeptEveryStepAreALeak) {
  Replay replay;
  replay.segment(kBase, 64 * kMiB);  // workspace, reused every step
  for (int i = 0; i < 20; ++i) {
    replay.alloc(kBase, 48 * kMiB);
    replay.free(kBase);
    std::uint64_t kept = kBase + (i + 1) * 0x10000000ull;
    replay.segment(kept, 2 * kMiB);  // a small-pool segment for the block that is never freed
    replay.alloc(kept, kMiB, /*site=*/5);
    replay.endStep();
  }
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/3);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kLeak);
  EXPECT_NEAR(diagnosis.leak_bytes_per_step, kMiB, 1.0);
  EXPECT_NEAR(diagnosis.allocated_slope_per_step, kMiB, 1.0);
  EXPECT_EQ(diagnosis.allocated, 20 * kMiB);
  EXPECT_EQ(diagnosis.first_step, 3u);
  EXPECT_EQ(diagnosis.last_step, 19u);
  EXPECT_TRUE(mentions(diagnosis.hint, "leak")) << diagnosis.hint;
  EXPECT_EQ(replay.ledger.liveBlocksBySite(0).front().blocks, 20u);
  EXPECT_EQ(replay.totals().unmatched_events, 0u);
}

TEST(DeviceMemoryDiagnosis, AllocAndFreeEveryStepIsSteady) {
  Replay replay;
  replay.segment(kBase, 64 * kMiB);
  replay.alloc(kBase, 8 * kMiB, /*site=*/1);  // parameters
  for (int i = 0; i < 20; ++i) {
    replay.alloc(kBase + 8 * kMiB, 40 * kMiB, /*site=*/2);  // activations
    replay.free(kBase + 8 * kMiB);
    replay.endStep();
  }
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/2);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kSteady) << diagnosis.hint;
  EXPECT_EQ(diagnosis.leak_bytes_per_step, 0.0);
  EXPECT_EQ(diagnosis.allocated, 8 * kMiB);
  EXPECT_EQ(diagnosis.peak_allocated, 48 * kMiB);
  EXPECT_EQ(diagnosis.reserved, 64 * kMiB);
  EXPECT_EQ(diagnosis.reserved_above_peak, 16 * kMiB);
  // At the step boundary the segment is split (parameters + one free gap), yet the step fills it.
  EXPECT_EQ(diagnosis.inactive_split_blocks, 1u);
  EXPECT_EQ(diagnosis.inactive_split_bytes, 56 * kMiB);
  EXPECT_DOUBLE_EQ(diagnosis.reserved_to_allocated, 8.0);
}

TEST(DeviceMemoryDiagnosis, CacheKeptFromABigWarmUpIsCachingNotALeak) {
  Replay replay;
  replay.segment(kBase, 8 * kMiB);
  replay.alloc(kBase, 8 * kMiB, /*site=*/1);
  std::uint64_t big = kBase + 0x10000000ull;
  replay.segment(big, 256 * kMiB);
  for (int i = 0; i < 20; ++i) {
    std::uint64_t batch = i < 2 ? 200 * kMiB : 40 * kMiB;  // warm-up runs a big batch once
    replay.alloc(big, batch, /*site=*/2);
    replay.free(big);
    replay.endStep();
  }
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/2);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kCaching) << diagnosis.hint;
  EXPECT_EQ(diagnosis.leak_bytes_per_step, 0.0);
  EXPECT_EQ(diagnosis.reserved, 264 * kMiB);
  EXPECT_EQ(diagnosis.reserved_above_peak, 216 * kMiB);
  EXPECT_EQ(diagnosis.free_segment_bytes, 256 * kMiB);
  EXPECT_EQ(diagnosis.reserved_growth, 0u);
  EXPECT_TRUE(mentions(diagnosis.hint, "nvidia-smi")) << diagnosis.hint;
  EXPECT_TRUE(mentions(diagnosis.hint, "torch.cuda.empty_cache()")) << diagnosis.hint;
}

TEST(DeviceMemoryDiagnosis, ReservedStaircaseWithFlatAllocatedIsCachingNotALeak) {
  Replay replay;
  replay.segment(kBase, 8 * kMiB);
  replay.alloc(kBase, 8 * kMiB, /*site=*/1);
  for (std::uint64_t i = 0; i < 20; ++i) {
    // A new, slightly longer sequence each step: no cached segment fits, so a new one is made
    // and the old ones stay cached.
    std::uint64_t segment = kBase + (i + 1) * 0x10000000ull;
    std::uint64_t size = (20 + 2 * i) * kMiB;
    replay.segment(segment, size);
    replay.alloc(segment, size, /*site=*/2);
    replay.free(segment);
    replay.endStep();
  }
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/2);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kCaching) << diagnosis.hint;
  EXPECT_EQ(diagnosis.leak_bytes_per_step, 0.0);
  EXPECT_EQ(diagnosis.allocated, 8 * kMiB);
  EXPECT_GT(diagnosis.reserved_slope_per_step, 20.0 * kMiB);
  EXPECT_GE(diagnosis.reserved_growth, 500 * kMiB);
  EXPECT_TRUE(mentions(diagnosis.hint, "Reserved grew")) << diagnosis.hint;
}

TEST(DeviceMemoryDiagnosis, AllocatedThatRisesThenLevelsOffIsNeitherLeakNorCaching) {
  Replay replay;
  for (std::uint64_t i = 0; i < 30; ++i) {
    if (i < 10) {  // optimizer state made lazily, then complete
      std::uint64_t state = kBase + i * 0x10000000ull;
      replay.segment(state, 4 * kMiB);
      replay.alloc(state, 4 * kMiB, /*site=*/3);
    }
    replay.endStep();
  }
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/2);
  EXPECT_NE(diagnosis.verdict, DeviceVerdict::kLeak);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kSteady) << diagnosis.hint;
  EXPECT_EQ(diagnosis.leak_bytes_per_step, 0.0);
  EXPECT_GT(diagnosis.allocated_slope_per_step, 0.0);  // it did rise; it just stopped
  EXPECT_EQ(diagnosis.reserved_growth, 28 * kMiB);
  EXPECT_EQ(diagnosis.reserved, 40 * kMiB);
}

// 32 segments of 20 MiB, each pinned by a 1 MiB long-lived block at 8 MiB, leaving gaps of 8 and
// 11 MiB; 100 MiB of weights (site 1) in a segment of their own. Sites 7 and 3 pin the segments.
void buildFragmentedPool(Replay& replay) {
  replay.segment(kBase, 100 * kMiB);
  replay.alloc(kBase, 100 * kMiB, /*site=*/1);
  for (std::uint64_t i = 0; i < 32; ++i) {
    std::uint64_t segment = kBase + (i + 1) * 0x10000000ull;
    replay.segment(segment, 20 * kMiB);
    replay.alloc(segment, 8 * kMiB, /*site=*/2);
    replay.alloc(segment + 8 * kMiB, kMiB, /*site=*/i < 20 ? 7u : 3u);
    replay.alloc(segment + 9 * kMiB, 11 * kMiB, /*site=*/2);
    replay.free(segment);
    replay.free(segment + 9 * kMiB);
  }
}

TEST(DeviceMemoryDiagnosis, PinnedBlocksInManySegmentsAreFragmentation) {
  Replay replay;
  buildFragmentedPool(replay);
  replay.endStep();
  replay.endStep();
  std::uint64_t spare = kBase + 0x1000000000ull;
  replay.segment(spare, 20 * kMiB);  // the 12 MiB request fits no gap: a segment of its own
  for (int i = 0; i < 18; ++i) {
    replay.alloc(spare, 12 * kMiB, /*site=*/2);
    replay.free(spare);
    replay.endStep();
  }
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/2);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kFragmentation) << diagnosis.hint;
  EXPECT_EQ(diagnosis.leak_bytes_per_step, 0.0);
  EXPECT_EQ(diagnosis.allocated, 132 * kMiB);
  EXPECT_EQ(diagnosis.reserved, 760 * kMiB);
  EXPECT_EQ(diagnosis.inactive_split_blocks, 64u);
  EXPECT_EQ(diagnosis.inactive_split_bytes, 32 * 19 * kMiB);
  EXPECT_EQ(diagnosis.largest_free_extent, 20 * kMiB);  // the spare segment, free between steps
  EXPECT_EQ(diagnosis.free_segment_bytes, 20 * kMiB);
  EXPECT_FALSE(diagnosis.oom_from_fragmentation);
  EXPECT_TRUE(mentions(diagnosis.hint, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
  EXPECT_TRUE(mentions(diagnosis.hint, "empty_cache")) << diagnosis.hint;
}

std::string siteName(std::uint32_t site) { return "model.py:" + std::to_string(site); }

TEST(OomForensics, ARequestLargerThanEveryFreePieceIsFragmentation) {
  Replay replay;
  buildFragmentedPool(replay);
  replay.endStep();
  replay.step = 20;
  replay.oom(12 * kMiB, /*device_free=*/4 * kMiB);

  DeviceMemoryTotals totals = replay.totals();
  EXPECT_EQ(totals.out_of_memory, 1u);
  EXPECT_EQ(totals.allocated, 132 * kMiB);  // the failing request was never applied
  const std::optional<OomRecord>& oom = replay.ledger.lastOom(0);
  ASSERT_TRUE(oom.has_value());
  EXPECT_FALSE(replay.ledger.lastOom(1).has_value());
  EXPECT_EQ(oom->requested_bytes, 12 * kMiB);
  EXPECT_EQ(oom->step, 20u);
  EXPECT_EQ(oom->reserved, 740 * kMiB);
  EXPECT_EQ(oom->largest_free_extent, 11 * kMiB);
  EXPECT_EQ(oom->largest_free_extent_on_stream, 11 * kMiB);
  EXPECT_EQ(oom->inactive_split_bytes, 32 * 19 * kMiB);
  EXPECT_EQ(oomCause(*oom), OomCause::kFragmentation);
  EXPECT_TRUE(mentions(oomExplanation(*oom), "Fragmentation")) << oomExplanation(*oom);

  nlohmann::ordered_json json = nlohmann::ordered_json::parse(oomForensicsJson(*oom, siteName));
  EXPECT_EQ(json.begin().key(), "schema");
  EXPECT_EQ(json["schema"], "memseal.cuda_oom/1");
  EXPECT_EQ(json["cause"], "fragmentation");
  EXPECT_EQ(json["requested_bytes"], 12 * kMiB);
  EXPECT_EQ(json["step"], 20);
  EXPECT_EQ(json["device_free_bytes"], 4 * kMiB);
  EXPECT_EQ(json["free_in_reserved_bytes"], 608 * kMiB);
  EXPECT_TRUE(mentions(json["explanation"].get<std::string>(), "largest free piece"));
  const auto& sites = json["largest_sites"];
  ASSERT_EQ(sites.size(), 3u);
  EXPECT_EQ(sites[0]["site"], 1);
  EXPECT_EQ(sites[0]["name"], "model.py:1");
  EXPECT_EQ(sites[0]["bytes"], 100 * kMiB);
  EXPECT_EQ(sites[1]["site"], 7);
  EXPECT_EQ(sites[1]["blocks"], 20);
  EXPECT_EQ(sites[2]["site"], 3);
  EXPECT_EQ(sites[2]["bytes"], 12 * kMiB);
  ASSERT_EQ(json["largest_blocks"].size(), kOomTopBlocks);
  EXPECT_EQ(json["largest_blocks"][0]["bytes"], 100 * kMiB);
  EXPECT_EQ(json["largest_blocks"][0]["address"], "0x7f0000000000");

  std::string text = oomForensicsText(*oom, siteName);
  EXPECT_TRUE(mentions(text, "at step 20")) << text;
  EXPECT_TRUE(mentions(text, "model.py:1")) << text;

  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/0);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kFragmentation);
  EXPECT_TRUE(diagnosis.oom_from_fragmentation);
  EXPECT_TRUE(mentions(diagnosis.hint, "out-of-memory at step 20")) << diagnosis.hint;
}

TEST(OomForensics, AFullDeviceIsAShortage) {
  Replay replay;
  replay.segment(kBase, 1024 * kMiB);
  for (std::uint64_t i = 0; i < 4; ++i) replay.alloc(kBase + i * 256 * kMiB, 256 * kMiB, 1);
  replay.step = 7;
  replay.oom(64 * kMiB, /*device_free=*/10 * kMiB);
  const std::optional<OomRecord>& oom = replay.ledger.lastOom(0);
  ASSERT_TRUE(oom.has_value());
  EXPECT_EQ(oom->largest_free_extent, 0u);
  EXPECT_EQ(oomCause(*oom), OomCause::kDeviceFull);
  EXPECT_TRUE(mentions(oomExplanation(*oom), "device is full")) << oomExplanation(*oom);
  EXPECT_TRUE(mentions(oomExplanation(*oom), "100% in use")) << oomExplanation(*oom);
  nlohmann::json json = nlohmann::json::parse(oomForensicsJson(*oom, nullptr));
  EXPECT_EQ(json["cause"], "device-full");
  EXPECT_EQ(json["largest_sites"][0]["name"], "site 1");
  EXPECT_EQ(json["largest_sites"][0]["blocks"], 4);

  OomRecord capped = *oom;
  capped.device_free_bytes = 2048 * kMiB;  // the device had room: this process hit a limit
  EXPECT_EQ(oomCause(capped), OomCause::kProcessLimit);
  EXPECT_TRUE(mentions(oomExplanation(capped), "set_per_process_memory_fraction"));
  EXPECT_FALSE(mentions(oomExplanation(capped), "expandable_segments")) << oomExplanation(capped);
}

TEST(OomForensics, AFragmentedCacheUnderAProcessLimitIsTheLimitFirst) {
  Replay replay;
  buildFragmentedPool(replay);
  replay.oom(12 * kMiB, /*device_free=*/100 * 1024 * kMiB);  // the device had room
  const std::optional<OomRecord>& oom = replay.ledger.lastOom(0);
  ASSERT_TRUE(oom.has_value());
  EXPECT_EQ(oomCause(*oom), OomCause::kProcessLimit);
  std::string explanation = oomExplanation(*oom);
  EXPECT_TRUE(mentions(explanation, "set_per_process_memory_fraction")) << explanation;
  EXPECT_TRUE(mentions(explanation, "split into pieces smaller than the request")) << explanation;
  EXPECT_TRUE(mentions(explanation, "expandable_segments:True")) << explanation;
}

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

TEST(DeviceMemoryDiagnosis, NothingAfterWarmUpIsNotJudged) {
  Replay replay;
  replay.segment(kBase, kMiB);
  replay.endStep();
  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/5);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kSteady);
  EXPECT_EQ(diagnosis.observed_samples, 0u);
  EXPECT_TRUE(mentions(diagnosis.hint, "warm-up")) << diagnosis.hint;
  EXPECT_STREQ(deviceVerdictName(DeviceVerdict::kFragmentation), "fragmentation");
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

TEST(DeviceSummary, ThinnedStepsKeepEachStretchsPeaks) {
  std::vector<DeviceStepSample> samples;
  for (std::uint32_t step = 0; step < 1000; ++step) {
    DeviceStepSample sample;
    sample.step = step;
    sample.allocated = step == 501 ? 999 * kMiB : kMiB;
    sample.reserved = step == 998 ? 500 * kMiB : 20 * kMiB;
    samples.push_back(sample);
  }
  std::vector<DeviceStepPoint> points = detect::thinDeviceSteps(samples, 512);
  ASSERT_EQ(points.size(), 500u);  // stretches of 2
  EXPECT_EQ(points.front().step, 1u);
  EXPECT_EQ(points.back().step, 999u);
  EXPECT_EQ(points[250].allocated, 999 * kMiB);
  EXPECT_EQ(points[499].reserved, 500 * kMiB);
  EXPECT_EQ(detect::thinDeviceSteps(samples, 2000).size(), 1000u);
  EXPECT_TRUE(detect::thinDeviceSteps({}, 512).empty());
}

}  // namespace
}  // namespace memseal
