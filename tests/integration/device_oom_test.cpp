// An out-of-memory on a CUDA device, from synthetic allocator events: its forensics file, what the
// report and stderr say, and the allocator setting that would have avoided a fragmentation one.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "integration/device_events.h"
#include "memseal/leak_detector.h"

namespace memseal {
namespace {

using namespace test;  // NOLINT: the synthetic events and their helpers

TEST(DeviceOutOfMemory, AnOutOfMemoryWritesItsForensicsAndTheReportNamesTheFile) {
  // (std::filesystem is avoided: libtorch.so carries its own copy of parts of it.)
  char folder_template[] = "/tmp/memseal-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  LeakDetector detector(quietDeviceDetector());
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
TEST(DeviceOutOfMemory, AFragmentationOutOfMemoryNamesTheSettingThatWouldHaveAvoidedIt) {
  char folder_template[] = "/tmp/memseal-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  for (const char* variable : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    unsetenv(variable);
  }
  LeakDetector detector(quietDeviceDetector());
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

}  // namespace
}  // namespace memseal
