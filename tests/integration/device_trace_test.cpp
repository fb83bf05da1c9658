// A MemoryTrace of CUDA devices, from synthetic allocator events: each device written as torch's
// own snapshot does, for PyTorch's memory viewer.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <cstdio>
#include <fstream>
#include <string>

#include "integration/device_events.h"
#include "memseal/leak_detector.h"
#include "memseal/memory_trace.h"

namespace memseal {
namespace {

using namespace test;  // NOLINT: the synthetic events and their helpers

// A trace of two CUDA devices as the caching allocator would report it: segments holding several
// blocks, a whole segment's life, pending and completed frees, an expandable segment mapped in
// pieces and unmapped at its end, another stream, an out-of-memory.
TEST(DeviceTrace, MemoryTraceWritesEachCudaDeviceForTheViewer) {
  char folder_template[] = "/tmp/memseal-viz-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  LeakDetector detector(test::quietDeviceDetector());
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

}  // namespace
}  // namespace memseal
