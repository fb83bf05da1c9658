// CUDA memory through the leak detector and lifetime scopes, fed with synthetic allocator events:
// kept blocks are retained CUDA tensors (one finding, the allocator's growth a note); caching is a
// note, not a leak; a block kept past a lifetime scope is its survivor; blocks of steps whose ops
// are not watched get the site of the watched step; the report summarises each device.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "integration/device_events.h"
#include "memseal/leak_detector.h"
#include "memseal/scope.h"
#include "report/html_report.h"

namespace memseal {
namespace {

using namespace test;  // NOLINT: the synthetic events and their helpers

TEST(DeviceLeaks, BlocksKeptEveryStepAreRetainedCudaTensors) {
  LeakDetector detector(quietDeviceDetector());
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x10000000, 512 * kMiB));
  for (std::uint64_t step = 0; step < 24; ++step) {
    // One 1 MiB output kept per step (the bug), one 4 MiB temporary freed.
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, 0x10000000 + step * kMiB, kMiB));
    std::uint64_t temporary = 0x20000000;
    allocateAndFree(temporary, 4 * kMiB);
    detector.step();
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  // The kept blocks are live records like CPU tensors: one finding from the census, on cuda:0,
  // and the allocator's own view of the growth is a note beside it, not a second finding.
  ASSERT_EQ(report.findings.size(), 1u) << report.toText();
  const LeakFinding& finding = report.findings.front();
  EXPECT_EQ(finding.category, LeakCategory::kTensorsRetained) << report.toText();
  EXPECT_EQ(finding.retained, "tensor storage") << report.toText();
  EXPECT_EQ(finding.tensor.device, "cuda:0") << report.toText();
  EXPECT_NEAR(finding.bytes_per_step, static_cast<double>(kMiB), kMiB / 8.0) << report.toText();
  EXPECT_GE(finding.survivors, 18);  // the blocks made after warm-up, still live
  EXPECT_NE(report.toText().find("(no tensor metadata) on cuda:0"), std::string::npos)
      << report.toText();
  EXPECT_TRUE(hasNote(report, "cuda:0: memory allocated to tensors grows +1.0 MiB/step"))
      << report.toText();
}

TEST(DeviceLeaks, FreedBlocksLeaveNoRecordBehind) {
  LeakDetector detector(quietDeviceDetector());
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x30000000, 8 * kMiB));
  for (std::uint64_t step = 0; step < 24; ++step) {
    // Blocks kept for two steps, then freed: a sliding window, as a prefetching loader keeps.
    track::recordDeviceEvent(
        event(DeviceEventKind::kBlockAlloc, 0x30000000 + (step % 3) * kMiB, kMiB));
    if (step >= 2) {
      std::uint64_t old = 0x30000000 + ((step - 2) % 3) * kMiB;
      track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, old, kMiB));
      track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeCompleted, old, kMiB));
    }
    detector.step();
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_TRUE(hasNote(report, "cuda:0: steady")) << report.toText();
}

TEST(DeviceLeaks, ABlockMadeInALifetimeScopeAndKeptIsItsSurvivor) {
  ScopeOptions options;
  options.on_survivors = ReportPolicy::kNone;
  ScopeReport report;
  {
    LifetimeScope scope("device", options);
    track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x70000000, 64 * kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, 0x70000000, 2 * kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, 0x70200000, kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, 0x70200000, kMiB));
    report = scope.close();
  }
  ASSERT_EQ(report.stats.survivors, 1) << report.toText();
  EXPECT_EQ(report.stats.survivor_bytes, static_cast<std::int64_t>(2 * kMiB));
  ASSERT_EQ(report.survivors.size(), 1u);
  EXPECT_EQ(report.survivors.front().allocation.tensor.device, "cuda:0");
  track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, 0x70000000, 2 * kMiB));
}

TEST(DeviceLeaks, ACudaTensorsDeviceSurvivesTheJsonRoundTrip) {
  LeakReport report;
  LeakFinding finding;
  finding.category = LeakCategory::kTensorsRetained;
  finding.retained = "tensor storage";
  finding.tensor.known = true;
  finding.tensor.shape = {256, 512};
  finding.tensor.dtype = "Float";
  finding.tensor.device = "cuda:1";
  report.findings.push_back(finding);
  report.leak = true;
  LeakReport read = LeakReport::fromJson(report.toJson());
  ASSERT_EQ(read.findings.size(), 1u);
  EXPECT_EQ(read.findings.front().tensor.device, "cuda:1");
  EXPECT_NE(read.toText().find("[256, 512] Float cuda:1"), std::string::npos) << read.toText();
}

TEST(DeviceLeaks, ACacheLargerThanTheStepNeedsIsANoteNotALeak) {
  LeakDetector detector(quietDeviceDetector());
  // A big warm-up request left a 256 MiB segment in the cache; steps use 8 MiB of it.
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x40000000, 256 * kMiB));
  allocateAndFree(0x40000000, 200 * kMiB);
  for (int step = 0; step < 24; ++step) {
    allocateAndFree(0x40000000, 8 * kMiB);
    detector.step();
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_TRUE(hasNote(report, "cuda:0: caching, not a leak")) << report.toText();
}

TEST(DeviceLeaks, AStepThatNeedsMoreEachTimeButKeepsNothingIsNoLeak) {
  LeakDetector detector(quietDeviceDetector());
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x50000000, 1024 * kMiB));
  for (std::uint64_t step = 0; step < 24; ++step) {
    // A batch that grows every step: its activations are live at the boundary (which falls inside
    // the iteration) and freed right after it.
    std::uint64_t activations = 0x50000000 + (step % 2) * 512 * kMiB;
    std::uint64_t bytes = (step + 1) * 4 * kMiB;
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, activations, bytes));
    detector.step();
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, activations, bytes));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeCompleted, activations, bytes));
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_TRUE(hasNote(report, "cuda:0: memory allocated at step boundaries grows"))
      << report.toText();
  EXPECT_TRUE(hasNote(report, "no block outlives the step after the one that made it"))
      << report.toText();
  ASSERT_EQ(report.devices.size(), 1u);
  EXPECT_EQ(report.devices[0].growth_shown_as, "work");
  EXPECT_GT(report.devices[0].growth_per_step, 0);
}

// Ops watched on one step in N (as watch_ops=auto does once a loop repeats itself): the blocks
// of the steps in between have no op around them, and get the site the same block had on the last
// watched step, in the live table (the finding) and in the allocator's ledger (which out-of-memory
// forensics read). A block of another size is not guessed.
TEST(DeviceLeaks, BlocksOfStepsWhoseOpsAreNotWatchedGetTheSiteOfTheWatchedStep) {
  char folder_template[] = "/tmp/memseal-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  DetectorOptions options = quietDeviceDetector();
  options.tracker.watch_ops = OpWatching::oneStepIn(4);
  LeakDetector detector(options);
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x60000000, 512 * kMiB));
  constexpr std::uint64_t kSteps = 24;
  for (std::uint64_t step = 0; step < kSteps; ++step) {
    {
      RECORD_FUNCTION("test::scratch", std::vector<c10::IValue>());
      allocateAndFree(0x60000000 + 256 * kMiB, 4 * kMiB);
    }
    RECORD_FUNCTION("test::kept_block", std::vector<c10::IValue>());
    // The last step (not watched) keeps a block of another size.
    std::uint64_t bytes = step + 1 == kSteps ? 2 * kMiB : kMiB;
    track::recordDeviceEvent(
        event(DeviceEventKind::kBlockAlloc, 0x60000000 + step * 2 * kMiB, bytes));
    detector.step();
  }
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  DeviceMemoryEvent oom = event(DeviceEventKind::kOutOfMemory, 0, 1024 * kMiB);
  oom.device_free_bytes = 10 * kMiB;
  ::testing::internal::CaptureStderr();
  track::recordDeviceEvent(oom);
  ::testing::internal::GetCapturedStderr();
  unsetenv("MEMSEAL_OOM_DIR");
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  const LeakFinding& finding = report.findings.front();
  EXPECT_EQ(finding.site.op, "test::kept_block") << report.toText();
  EXPECT_GE(finding.survivors, static_cast<std::int64_t>(kSteps) - 8) << report.toText();
  std::string path = track::lastOomForensicsPath();
  ASSERT_FALSE(path.empty());
  nlohmann::json forensics = nlohmann::json::parse(std::ifstream(path));
  std::int64_t kept = 0;
  std::int64_t unwatched = 0;
  for (const nlohmann::json& site : forensics.at("largest_sites")) {
    if (site.at("name") == "test::kept_block") kept += site.at("blocks").get<std::int64_t>();
    if (site.at("name") == "<op not watched on this step>") {
      unwatched += site.at("bytes").get<std::int64_t>();
    }
  }
  EXPECT_EQ(kept, static_cast<std::int64_t>(kSteps) - 1) << forensics.dump(2);
  EXPECT_EQ(unwatched, static_cast<std::int64_t>(2 * kMiB)) << forensics.dump(2);
  std::remove(path.c_str());
  rmdir(folder.c_str());
}

TEST(DeviceLeaks, TheReportSummarisesEachDeviceInJsonAndHtml) {
  LeakDetector detector(quietDeviceDetector());
  // cuda:0 caches a big warm-up request; cuda:1 holds one steady block.
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x40000000, 256 * kMiB));
  allocateAndFree(0x40000000, 200 * kMiB);
  DeviceMemoryEvent other = event(DeviceEventKind::kSegmentAlloc, 0x90000000, 20 * kMiB);
  other.device = 1;
  track::recordDeviceEvent(other);
  other.kind = DeviceEventKind::kBlockAlloc;
  other.bytes = kMiB;
  track::recordDeviceEvent(other);
  for (int step = 0; step < 24; ++step) {
    allocateAndFree(0x40000000, 8 * kMiB);
    detector.step();
  }
  LeakReport report = detector.finish();
  ASSERT_EQ(report.devices.size(), 2u) << report.toJson();
  const DeviceMemorySummary& cached = report.devices[0];
  EXPECT_EQ(cached.device, "cuda:0");
  EXPECT_EQ(cached.verdict, "caching");
  EXPECT_EQ(cached.allocated, 0u);
  EXPECT_EQ(cached.reserved, 256 * kMiB);
  EXPECT_EQ(cached.peak_allocated, 200 * kMiB);
  EXPECT_EQ(cached.peak_reserved, 256 * kMiB);
  EXPECT_EQ(cached.largest_free_extent, 256 * kMiB);
  EXPECT_FALSE(cached.hint.empty());
  ASSERT_EQ(cached.per_step.size(), 24u);
  EXPECT_EQ(cached.per_step.back().reserved, 256 * kMiB);
  EXPECT_EQ(report.devices[1].device, "cuda:1");
  EXPECT_EQ(report.devices[1].allocated, kMiB);
  EXPECT_EQ(report.devices[1].inactive_split_bytes, 19 * kMiB);

  // The JSON round trip keeps every field; older files without "devices" read as none.
  LeakReport back = LeakReport::fromJson(report.toJson());
  ASSERT_EQ(back.devices.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const DeviceMemorySummary& a = report.devices[i];
    const DeviceMemorySummary& b = back.devices[i];
    EXPECT_EQ(a.device, b.device);
    EXPECT_EQ(a.verdict, b.verdict);
    EXPECT_EQ(a.allocated, b.allocated);
    EXPECT_EQ(a.reserved, b.reserved);
    EXPECT_EQ(a.peak_allocated, b.peak_allocated);
    EXPECT_EQ(a.peak_reserved, b.peak_reserved);
    EXPECT_EQ(a.inactive_split_bytes, b.inactive_split_bytes);
    EXPECT_EQ(a.largest_free_extent, b.largest_free_extent);
    EXPECT_EQ(a.hint, b.hint);
    ASSERT_EQ(a.per_step.size(), b.per_step.size());
    for (std::size_t p = 0; p < a.per_step.size(); ++p) {
      EXPECT_EQ(a.per_step[p].step, b.per_step[p].step);
      EXPECT_EQ(a.per_step[p].allocated, b.per_step[p].allocated);
      EXPECT_EQ(a.per_step[p].reserved, b.per_step[p].reserved);
    }
  }
  EXPECT_EQ(back.toJson(), report.toJson());
  nlohmann::json json = nlohmann::json::parse(report.toJson());
  json.erase("devices");
  EXPECT_TRUE(LeakReport::fromJson(json.dump()).devices.empty());
  json["devices"] = {{{"device", "cuda:0"}, {"verdict", "steady"}}};
  try {
    LeakReport::fromJson(json.dump());
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(), "memseal report: devices[0] has no \"allocated\"");
  }

  std::string html =
      report::renderHtmlReport({{"check", nlohmann::json::parse(report.toJson())}}, "two devices");
  EXPECT_NE(html.find("id=\"cuda-memory\""), std::string::npos);
  EXPECT_NE(html.find("<h3>cuda:1</h3>"), std::string::npos);
}

TEST(DeviceLeaks, ACpuOnlyReportHasNoDevices) {
  track::resetDeviceLedger();
  LeakDetector detector(quietDeviceDetector());
  for (int step = 0; step < 8; ++step) detector.step();
  LeakReport report = detector.finish();
  EXPECT_TRUE(report.devices.empty());
  EXPECT_EQ(report.toJson().find("\"devices\""), std::string::npos);
}

TEST(DeviceLeaks, EventsOutsideASessionAreIgnored) {
  {
    LeakDetector detector(quietDeviceDetector());
    detector.finish();
  }
  track::resetDeviceLedger();
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x60000000, 64 * kMiB));
  EXPECT_FALSE(track::deviceEventsSeen());
}

}  // namespace
}  // namespace memseal
