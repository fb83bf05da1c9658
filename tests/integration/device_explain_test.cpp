// explain and fit on a CUDA device, from synthetic allocator events: each device's peak beside
// what the allocator reserved then, and the reserved peak fitted against size.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "integration/device_events.h"
#include "memseal/explain.h"
#include "memseal/fit.h"
#include "report/html_report.h"

namespace memseal {
namespace {

using namespace test;  // NOLINT: the synthetic events and their helpers

// explain on a CUDA step: each device's highest moment over the measured steps, allocated beside
// reserved, a block freed but waiting for its stream, and the roles of what the peak holds.
TEST(DeviceExplain, ExplainGivesEachDevicesPeakWithWhatTheAllocatorReservedThen) {
  constexpr std::uint64_t kSegment = 0x10000000;
  constexpr std::uint64_t kSecondSegment = 0x20000000;
  auto step = [&](int index) {
    if (index == 0) {
      track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, kSegment, 64 * kMiB));
      track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, kSegment, 4 * kMiB));  // kept
    }
    // Step 2 needs more than the cache holds: a segment of its own, given back at its end.
    const bool larger = index == 2;
    const std::uint64_t activation = larger ? kSecondSegment : kSegment + 4 * kMiB;
    const std::uint64_t activation_bytes = (larger ? 16 : 8) * kMiB;
    const std::uint64_t temporary = kSegment + 32 * kMiB;
    if (larger) {
      track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, kSecondSegment, 32 * kMiB));
    }
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, temporary, 2 * kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, temporary, 2 * kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, activation, activation_bytes));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeCompleted, temporary, 2 * kMiB));
    track::recordDeviceEvent(
        event(DeviceEventKind::kBlockFreeRequested, activation, activation_bytes));
    track::recordDeviceEvent(
        event(DeviceEventKind::kBlockFreeCompleted, activation, activation_bytes));
    if (larger) {
      track::recordDeviceEvent(event(DeviceEventKind::kSegmentFree, kSecondSegment, 32 * kMiB));
    }
  };
  ExplainOptions options;
  options.steps = 4;
  options.warmup = 1;
  PeakReport report = explainPeak(step, options);
  ASSERT_EQ(report.devices.size(), 1u) << report.toText();
  const DevicePeak& device = report.devices.front();
  EXPECT_EQ(device.device, 0);
  EXPECT_EQ(device.step, 2u);
  // The kept 4 MiB and the 16 MiB block; the temporary's 2 MiB wait for its stream.
  EXPECT_EQ(device.allocated_bytes, static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(device.pending_free_bytes, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(device.reserved_bytes, static_cast<std::int64_t>(96 * kMiB));
  EXPECT_EQ(device.cachedFreeBytes(), static_cast<std::int64_t>(74 * kMiB));
  EXPECT_EQ(device.reserved_peak_bytes, static_cast<std::int64_t>(96 * kMiB));
  EXPECT_EQ(device.baseline_allocated_bytes, static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(device.end_allocated_bytes, static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(device.blocks, 2);
  EXPECT_EQ(device.events, 8);
  auto role_bytes = [&](MemoryRole role) {
    return device.roles[static_cast<std::size_t>(role)].bytes;
  };
  EXPECT_EQ(role_bytes(MemoryRole::kTemporaries), static_cast<std::int64_t>(16 * kMiB));
  EXPECT_EQ(role_bytes(MemoryRole::kOther), static_cast<std::int64_t>(4 * kMiB));
  std::int64_t site_bytes = 0;
  for (const DevicePeakSite& site : device.sites) site_bytes += site.bytes;
  EXPECT_EQ(site_bytes, device.allocated_bytes);
  // The host's side is its own: no CUDA block counts in it.
  EXPECT_LT(report.peak_bytes, static_cast<std::int64_t>(4 * kMiB));

  nlohmann::json json = nlohmann::json::parse(report.toJson());
  ASSERT_EQ(json["devices"].size(), 1u);
  EXPECT_EQ(json["devices"][0]["device"], "cuda:0");
  EXPECT_EQ(json["devices"][0]["cached_free_bytes"], 74 * kMiB);
  EXPECT_EQ(json["devices"][0]["roles"].size(), 6u);
  std::string text = report.toText();
  EXPECT_NE(text.find("cuda:0 at its peak (step 2)\n  allocated  20.0 MiB   held by tensors"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  cached     74.0 MiB   reserved, held by no tensor"), std::string::npos)
      << text;
  EXPECT_NE(text.find("of host tensor memory live"), std::string::npos) << text;
  std::string html = report::renderHtmlReport({{"explain", json}}, "a CUDA step");
  EXPECT_NE(html.find("cuda:0 at its peak (step 2)"), std::string::npos);
  EXPECT_NE(html.find("74.0 MiB"), std::string::npos);
}

// fit on a CUDA device fits what the allocator reserved in the measured step at each size: here a
// segment of 2 MiB plus 4 MiB per unit of size, made and given back by every step.
TEST(DeviceExplain, FitMemoryNamesTheHostOrACudaDevice) {
  EXPECT_EQ(parseFitMemory("host"), -1);
  EXPECT_EQ(parseFitMemory("cuda"), 0);
  EXPECT_EQ(parseFitMemory("cuda:3"), 3);
  for (const char* refused : {"cuda:", "cuda:x", "cuda:-1", "gpu", "cuda:12345", "", "CUDA:0"}) {
    EXPECT_FALSE(parseFitMemory(refused).has_value()) << refused;
  }
}

TEST(DeviceExplain, FitOnADeviceFitsTheReservedPeakAgainstSize) {
  constexpr std::uint64_t kSegment = 0x30000000;
  auto step = [&](std::int64_t size, int) {
    const std::uint64_t bytes = (2 + 4 * static_cast<std::uint64_t>(size)) * kMiB;
    track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, kSegment, bytes));
    allocateAndFree(kSegment, bytes - kMiB);
    track::recordDeviceEvent(event(DeviceEventKind::kSegmentFree, kSegment, bytes));
  };
  FitOptions options;
  options.device = 0;
  options.budget_bytes = static_cast<std::int64_t>(100 * kMiB);
  options.margin = 0.1;
  FitReport report = fitCapacity(step, options);
  EXPECT_EQ(report.memory, "cuda:0");
  ASSERT_EQ(report.points.size(), 4u);
  EXPECT_EQ(report.points[2].peak_bytes, static_cast<std::int64_t>(18 * kMiB));
  EXPECT_EQ(report.model, "linear") << report.toText();
  // 90 MiB usable: 2 + 4 * 22 = 90.
  ASSERT_TRUE(report.predicted_max_size) << report.toText();
  EXPECT_EQ(*report.predicted_max_size, 22) << report.toText();
  EXPECT_NE(report.toText().find("reserved peak of cuda:0 by size"), std::string::npos)
      << report.toText();
  EXPECT_EQ(nlohmann::json::parse(report.toJson())["memory"], "cuda:0");

  // A device the step never used, and an index that is none.
  options.device = 1;
  EXPECT_THROW(fitCapacity(step, options), std::invalid_argument);
  options.device = -2;
  EXPECT_THROW(fitCapacity(step, options), std::invalid_argument);
}

}  // namespace
}  // namespace memseal
