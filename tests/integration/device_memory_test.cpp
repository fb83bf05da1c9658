// Device (CUDA) memory through the leak detector and scopes, fed with synthetic allocator events as
// the CUDA caching allocator's trace hook would send them: kept blocks are retained CUDA tensors
// (one finding, the allocator's growth a note); caching is a note, not a leak; a block kept past a
// lifetime scope is its survivor; an out-of-memory writes its forensics file and says where. The
// same on a real GPU, with ops and tensors, is in cuda_memory_test.cpp.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "integration/detector_helpers.h"
#include "memseal/explain.h"
#include "memseal/fit.h"
#include "memseal/leak_detector.h"
#include "memseal/scope.h"
#include "report/html_report.h"
#include "track/device_events.h"

namespace memseal {
namespace {

using track::DeviceEventKind;
using track::DeviceMemoryEvent;

constexpr std::uint64_t kMiB = 1 << 20;

DeviceMemoryEvent event(DeviceEventKind kind, std::uint64_t address, std::uint64_t bytes) {
  DeviceMemoryEvent made;
  made.kind = kind;
  made.address = address;
  made.bytes = bytes;
  return made;
}

// A block handed out and given back in full, as a temporary's is.
void allocateAndFree(std::uint64_t address, std::uint64_t bytes) {
  track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, address, bytes));
  track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, address, bytes));
  track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeCompleted, address, bytes));
}

DetectorOptions quietDetector() {
  DetectorOptions options = test::quietDetector();
  options.watch_resident_memory = false;
  return options;
}

using test::hasNote;

TEST(DeviceMemory, BlocksKeptEveryStepAreRetainedCudaTensors) {
  LeakDetector detector(quietDetector());
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

TEST(DeviceMemory, FreedBlocksLeaveNoRecordBehind) {
  LeakDetector detector(quietDetector());
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

TEST(DeviceMemory, ABlockMadeInALifetimeScopeAndKeptIsItsSurvivor) {
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

TEST(DeviceMemory, ACudaTensorsDeviceSurvivesTheJsonRoundTrip) {
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

TEST(DeviceMemory, ACacheLargerThanTheStepNeedsIsANoteNotALeak) {
  LeakDetector detector(quietDetector());
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

TEST(DeviceMemory, AStepThatNeedsMoreEachTimeButKeepsNothingIsNoLeak) {
  LeakDetector detector(quietDetector());
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

TEST(DeviceMemory, AnOutOfMemoryWritesItsForensicsAndTheReportNamesTheFile) {
  // (std::filesystem is avoided: libtorch.so carries its own copy of parts of it.)
  char folder_template[] = "/tmp/memseal-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  LeakDetector detector(quietDetector());
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x50000000, 64 * kMiB));
  track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, 0x50000000, 48 * kMiB));
  detector.step();
  DeviceMemoryEvent oom = event(DeviceEventKind::kOutOfMemory, 0, 1024 * kMiB);
  oom.device_free_bytes = 10 * kMiB;
  ::testing::internal::CaptureStderr();
  track::recordDeviceEvent(oom);
  std::string said = ::testing::internal::GetCapturedStderr();
  unsetenv("MEMSEAL_OOM_DIR");
  std::string path = track::lastOomForensicsPath();
  ASSERT_FALSE(path.empty()) << said;
  EXPECT_EQ(path.rfind(folder + "/memseal-cuda-oom-", 0), 0u) << path;
  EXPECT_NE(said.find("memseal: CUDA out of memory on cuda:0 (1.0 GiB requested"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("What was live is in " + path), std::string::npos) << said;
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  EXPECT_NE(content.str().find("\"schema\": \"memseal.cuda_oom/1\""), std::string::npos)
      << content.str();
  EXPECT_NE(content.str().find("\"requested_bytes\": 1073741824"), std::string::npos)
      << content.str();
  LeakReport report = detector.finish();
  EXPECT_TRUE(hasNote(report, "CUDA ran out of memory; what was live then is in " + path))
      << report.toText();
  std::remove(path.c_str());
  rmdir(folder.c_str());
}

// Two segments split by 8 MiB blocks, half freed, cannot serve 24 MiB on a device with 22 MiB
// left (explain/cuda_oom_replay.h works the answer out by hand): the forensics replay the events
// the ledger kept and name the setting that would have avoided it, in the file and on stderr.
TEST(DeviceMemory, AFragmentationOutOfMemoryNamesTheSettingThatWouldHaveAvoidedIt) {
  char folder_template[] = "/tmp/memseal-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  for (const char* variable : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    unsetenv(variable);
  }
  LeakDetector detector(quietDetector());
  for (std::uint64_t segment : {0x60000000ull, 0x70000000ull}) {
    track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, segment, 20 * kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, segment, 8 * kMiB));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, segment + 8 * kMiB, 8 * kMiB));
  }
  detector.step();
  for (std::uint64_t block : {0x60000000ull, 0x70000000ull}) {
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, block, 0));
    track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeCompleted, block, 0));
  }
  DeviceMemoryEvent oom = event(DeviceEventKind::kOutOfMemory, 0, 24 * kMiB);
  oom.device_free_bytes = 22 * kMiB;
  ::testing::internal::CaptureStderr();
  track::recordDeviceEvent(oom);
  std::string said = ::testing::internal::GetCapturedStderr();
  unsetenv("MEMSEAL_OOM_DIR");
  EXPECT_NE(said.find("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True would have avoided it"),
            std::string::npos)
      << said;
  std::string path = track::lastOomForensicsPath();
  ASSERT_FALSE(path.empty()) << said;
  std::ifstream file(path);
  nlohmann::json json = nlohmann::json::parse(file);
  const auto& settings = json["allocator_settings"];
  EXPECT_EQ(settings["reproduced"], true) << json.dump(2);
  EXPECT_EQ(settings["history_complete"], true);
  EXPECT_EQ(settings["allocations_replayed"], 5);
  EXPECT_EQ(settings["alternatives"][0]["setting"], "expandable_segments:True");
  EXPECT_EQ(settings["alternatives"][0]["avoids_the_error"], true);
  detector.finish();
  std::remove(path.c_str());
  rmdir(folder.c_str());
}

// Ops watched on one step in N (as observe_ops=auto does once a loop repeats itself): the blocks
// of the steps in between have no op around them, and get the site the same block had on the last
// watched step, in the live table (the finding) and in the allocator's ledger (which out-of-memory
// forensics read). A block of another size is not guessed.
TEST(DeviceMemory, BlocksOfStepsWhoseOpsAreNotWatchedGetTheSiteOfTheWatchedStep) {
  char folder_template[] = "/tmp/memseal-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  DetectorOptions options = quietDetector();
  options.tracker.observe_ops = OpWatching::oneStepIn(4);
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

TEST(DeviceMemory, TheReportSummarisesEachDeviceInJsonAndHtml) {
  LeakDetector detector(quietDetector());
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

TEST(DeviceMemory, ACpuOnlyReportHasNoDevices) {
  track::resetDeviceLedger();
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 8; ++step) detector.step();
  LeakReport report = detector.finish();
  EXPECT_TRUE(report.devices.empty());
  EXPECT_EQ(report.toJson().find("\"devices\""), std::string::npos);
}

// A trace of two CUDA devices as the caching allocator would report it: segments holding several
// blocks, a whole segment's life, pending and completed frees, an expandable segment mapped in
// pieces and unmapped at its end, another stream, an out-of-memory.
TEST(DeviceMemory, MemoryTraceWritesEachCudaDeviceForTheViewer) {
  char folder_template[] = "/tmp/memseal-viz-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  LeakDetector detector(quietDetector());
  MemoryTrace trace;
  trace.start();
  auto send = [](DeviceEventKind kind, std::uint64_t address, std::uint64_t bytes, int device = 0,
                 std::uint64_t stream = 0) {
    DeviceMemoryEvent made = event(kind, address, bytes);
    made.device = device;
    made.stream = stream;
    track::recordDeviceEvent(made);
  };
  auto release = [&](std::uint64_t address, std::uint64_t bytes) {
    send(DeviceEventKind::kBlockFreeRequested, address, bytes);
    send(DeviceEventKind::kBlockFreeCompleted, address, bytes);
  };
  // A large segment, three blocks, the middle one freed: a gap inside a used segment.
  send(DeviceEventKind::kSegmentAlloc, 0x10000000, 20 * kMiB);
  send(DeviceEventKind::kBlockAlloc, 0x10000000, 4 * kMiB);
  send(DeviceEventKind::kBlockAlloc, 0x10400000, 2 * kMiB);
  send(DeviceEventKind::kBlockAlloc, 0x10600000, kMiB);
  release(0x10400000, 2 * kMiB);
  detector.step();
  // A small segment with a block still used by a stream at the end.
  send(DeviceEventKind::kSegmentAlloc, 0x20000000, 2 * kMiB);
  send(DeviceEventKind::kBlockAlloc, 0x20000000, 512);
  send(DeviceEventKind::kBlockAlloc, 0x20000200, 1024);
  send(DeviceEventKind::kBlockFreeRequested, 0x20000000, 512);
  // A segment made, used and given back within the trace.
  send(DeviceEventKind::kSegmentAlloc, 0x30000000, 20 * kMiB);
  send(DeviceEventKind::kBlockAlloc, 0x30000000, 12 * kMiB);
  release(0x30000000, 12 * kMiB);
  send(DeviceEventKind::kSegmentFree, 0x30000000, 20 * kMiB);
  detector.step();
  // Expandable: two mappings grow one segment, a block spans them, the next mapping goes again.
  send(DeviceEventKind::kSegmentMap, 0x40000000, 2 * kMiB);
  send(DeviceEventKind::kSegmentMap, 0x40200000, 2 * kMiB);
  send(DeviceEventKind::kBlockAlloc, 0x40000000, 3 * kMiB);
  send(DeviceEventKind::kSegmentMap, 0x40400000, 2 * kMiB);
  send(DeviceEventKind::kSegmentUnmap, 0x40400000, 2 * kMiB);
  // Another stream's segment, and the request that failed.
  send(DeviceEventKind::kSegmentAlloc, 0x50000000, 20 * kMiB, 0, 0x5eed);
  send(DeviceEventKind::kBlockAlloc, 0x50000000, 6 * kMiB, 0, 0x5eed);
  DeviceMemoryEvent oom = event(DeviceEventKind::kOutOfMemory, 0, 64ull << 30);
  oom.device_free_bytes = 1ull << 30;
  ::testing::internal::CaptureStderr();
  track::recordDeviceEvent(oom);
  ::testing::internal::GetCapturedStderr();
  // cuda:1: one segment, one block.
  send(DeviceEventKind::kSegmentAlloc, 0x60000000, 20 * kMiB, 1);
  send(DeviceEventKind::kBlockAlloc, 0x60000000, 8 * kMiB, 1);
  detector.step();
  trace.stop();
  unsetenv("MEMSEAL_OOM_DIR");
  std::string oom_path = track::lastOomForensicsPath();
  if (!oom_path.empty()) std::remove(oom_path.c_str());
  rmdir(folder.c_str());
  detector.finish();

  std::string bytes = trace.memoryVizPickle();
  EXPECT_GT(bytes.size(), 100u);
  // The pickle's own structure is read back by memory_viz_test (unit) and by the Python check.
  if (const char* path = std::getenv("MEMSEAL_CUDA_VIZ_SAMPLE")) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    ASSERT_TRUE(out) << "cannot write " << path;
    std::printf("wrote %zu bytes to %s\n", bytes.size(), path);
  }
}

// explain on a CUDA step: each device's highest moment over the measured steps, allocated beside
// reserved, a block freed but waiting for its stream, and the roles of what the peak holds.
TEST(DeviceMemory, ExplainGivesEachDevicesPeakWithWhatTheAllocatorReservedThen) {
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
  EXPECT_NE(text.find("  cached     74.0 MiB   reserved but in no block"), std::string::npos)
      << text;
  EXPECT_NE(text.find("of host tensor memory live"), std::string::npos) << text;
  std::string html = report::renderHtmlReport({{"explain", json}}, "a CUDA step");
  EXPECT_NE(html.find("cuda:0 at its peak (step 2)"), std::string::npos);
  EXPECT_NE(html.find("74.0 MiB"), std::string::npos);
}

// fit on a CUDA device fits what the allocator reserved in the measured step at each size: here a
// segment of 2 MiB plus 4 MiB per unit of size, made and given back by every step.
TEST(DeviceMemory, FitOnADeviceFitsTheReservedPeakAgainstSize) {
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

TEST(DeviceMemory, EventsOutsideASessionAreIgnored) {
  {
    LeakDetector detector(quietDetector());
    detector.finish();
  }
  track::resetDeviceLedger();
  track::recordDeviceEvent(event(DeviceEventKind::kSegmentAlloc, 0x60000000, 64 * kMiB));
  EXPECT_FALSE(track::deviceEventsSeen());
}

}  // namespace
}  // namespace memseal
