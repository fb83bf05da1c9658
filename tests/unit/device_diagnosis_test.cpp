// The diagnosis of a CUDA device's memory on synthetic allocator event streams: leaks, caching
// and fragmentation told apart, and the summary's thinned steps.
#include "detect/device_diagnosis.h"
#include "detect/device_summary.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "device_replay.h"

namespace memseal {
namespace {

using namespace track;   // NOLINT: the ledger, its events and samples
using namespace detect;  // NOLINT: the diagnosis
using namespace test;    // NOLINT: the replay

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
