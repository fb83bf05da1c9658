// The verdict over a forked child's windows (detect/forked_child_verdict.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "detect/forked_child_verdict.h"

namespace {

using memseal::detect::forkedChildReport;

std::vector<std::int64_t> flat(std::size_t windows, std::int64_t bytes) {
  return std::vector<std::int64_t>(windows, bytes);
}

TEST(ForkChildReport, TensorMemoryThatKeepsGrowingIsRetained) {
  std::vector<std::int64_t> tensors;
  for (int i = 0; i < 40; ++i) tensors.push_back(1'000'000 + i * 64 * 1024 + (i % 3) * 4096);
  memseal::LeakReport report = forkedChildReport(1, tensors, flat(40, 50'000'000));
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].category, memseal::LeakCategory::kTensorsRetained);
  EXPECT_EQ(report.origin.forked_from_pid, 1);
}

TEST(ForkChildReport, TensorsInFlightThatRiseByChanceAreNot) {
  // A worker's batch in flight, 0..16 KiB at each window's end, whose segment maxima happen to
  // rise: a few KiB in all, less than the in-flight churn.
  std::vector<std::int64_t> tensors;
  for (int i = 0; i < 60; ++i) {
    std::int64_t in_flight = ((i * 7919) % 13) * 1024 + (i / 15) * 1500;
    tensors.push_back(4096 + in_flight);
  }
  tensors.back() = tensors.back() + 16 * 1024;  // the last window holds a whole batch
  memseal::LeakReport report = forkedChildReport(1, tensors, flat(60, 50'000'000));
  EXPECT_TRUE(report.findings.empty());
}

}  // namespace
