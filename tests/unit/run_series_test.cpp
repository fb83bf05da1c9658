// The run series a renewal reads: kept from one renewal to the next, it must equal the series read
// afresh from the samples, whatever happened in between (samples added, the spacing doubled, the
// older half thinned, a range cut short), and stay within its bound, evenly spaced, the last
// sample always in it.
#include "detect/run_series.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/bounded_samples.h"

namespace memseal::detect {
namespace {

StepSample sampleAt(std::uint32_t step) {
  StepSample sample;
  sample.step = step;
  sample.live_bytes = 1000 + 3 * static_cast<std::int64_t>(step);
  sample.resident_bytes = 50000 + 7 * static_cast<std::int64_t>(step);
  return sample;
}

void expectSameSeries(const RunSeries& kept, const RunSeries& fresh) {
  EXPECT_EQ(kept.count, fresh.count);
  EXPECT_EQ(kept.recent, fresh.recent);
  EXPECT_EQ(kept.steps, fresh.steps);
  EXPECT_EQ(kept.live, fresh.live);
  EXPECT_EQ(kept.resident, fresh.resident);
}

// Samples one per step: the series' steps are its samples' indices in the range, offset.
void expectEvenlySpacedWithTheLast(const RunSeries& series, std::uint32_t first_step) {
  ASSERT_FALSE(series.steps.empty());
  EXPECT_LE(series.steps.size(), kMaxRunSamples);
  EXPECT_EQ(series.steps.front(), first_step);
  EXPECT_EQ(series.steps.back(), series.recent[series.count - 1].step);
  std::size_t stride = runSeriesStride(series.count);
  for (std::size_t i = 0; i + 1 < series.steps.size(); ++i) {
    std::uint32_t gap = series.steps[i + 1] - series.steps[i];
    bool last_off_grid = i + 2 == series.steps.size();
    if (last_off_grid) {
      EXPECT_GE(gap, 1u);
      EXPECT_LE(gap, stride);
    } else {
      EXPECT_EQ(gap, stride) << "at point " << i;
    }
  }
  for (std::size_t i = 0; i < series.steps.size(); ++i) {
    EXPECT_EQ(series.live[i], sampleAt(series.steps[i]).live_bytes);
    EXPECT_EQ(series.resident[i], sampleAt(series.steps[i]).resident_bytes);
  }
}

TEST(RunSeries, StrideIsThePowerOfTwoThatKeepsTheBound) {
  EXPECT_EQ(runSeriesStride(1), 1u);
  EXPECT_EQ(runSeriesStride(kMaxRunSamples - 1), 1u);
  EXPECT_EQ(runSeriesStride(kMaxRunSamples), 2u);
  for (std::size_t count = 1; count < 40000; count += 37) {
    std::size_t stride = runSeriesStride(count);
    EXPECT_EQ(stride & (stride - 1), 0u);
    EXPECT_LE((count + stride - 1) / stride, kMaxRunSamples - 1);
    if (stride > 1) {
      EXPECT_GT((count + stride / 2 - 1) / (stride / 2), kMaxRunSamples - 1);
    }
  }
}

TEST(RunSeries, KeptFromRenewalToRenewalItEqualsTheSeriesReadAfresh) {
  std::vector<StepSample> samples;
  RunSeriesCache kept;
  constexpr std::uint32_t kWarmup = 5;
  for (std::uint32_t step = 0; step < 6000; ++step) {
    samples.push_back(sampleAt(step));
    // Renewals at uneven intervals, as the verdict's schedule makes them.
    if (step < kWarmup || (step % 7 != 0 && step % 64 != 1)) continue;
    RunSeries series = kept.series(samples, kWarmup, step);
    expectSameSeries(series, RunSeriesCache().series(samples, kWarmup, step));
    expectEvenlySpacedWithTheLast(series, kWarmup);
  }
}

TEST(RunSeries, ThinningTheOlderHalfIsNoticed) {
  // Renewed right after each thinning (fewer samples than the points kept reach), and renewed
  // rarely (the samples grew back past the points kept: only their steps tell what moved). 6,000:
  // the spacing is 16 before and after a thinning, so the points kept are what must notice.
  for (std::uint32_t renewal_every : {5u, 1700u}) {
    std::vector<StepSample> samples;
    RunSeriesCache kept;
    int thinnings = 0;
    for (std::uint32_t step = 0; step < 20000; ++step) {
      samples.push_back(sampleAt(step));
      std::size_t before = samples.size();
      common::thinOlderHalf(samples, 6000);
      thinnings += samples.size() < before ? 1 : 0;
      bool renew =
          renewal_every == 5 ? samples.size() < before || step % 5 == 0 : step % renewal_every == 0;
      if (!renew) continue;
      expectSameSeries(kept.series(samples, 0, step), RunSeriesCache().series(samples, 0, step));
    }
    EXPECT_GE(thinnings, 3);
  }
}

TEST(RunSeries, ARangeCutShortOrBegunLaterIsReadAsAsked) {
  std::vector<StepSample> samples;
  for (std::uint32_t step = 0; step < 3000; ++step) samples.push_back(sampleAt(step));
  RunSeriesCache kept;
  expectSameSeries(kept.series(samples, 10, 2999), RunSeriesCache().series(samples, 10, 2999));
  RunSeries shorter = kept.series(samples, 10, 1500);
  expectSameSeries(shorter, RunSeriesCache().series(samples, 10, 1500));
  EXPECT_EQ(shorter.steps.back(), 1500u);
  RunSeries later = kept.series(samples, 700, 2999);
  expectSameSeries(later, RunSeriesCache().series(samples, 700, 2999));
  expectEvenlySpacedWithTheLast(later, 700);
  EXPECT_EQ(kept.series(samples, 3000, 3100).count, 0u);
}

}  // namespace
}  // namespace memseal::detect
