// The CUDA path's own cost without a GPU: a training step's caching-allocator events, as its trace
// hook hands them over, fed to the same entry point (track::recordDeviceEvent) with a tracker
// running, then the step boundary that closes the ledger's step sample. Run under callgrind with
// two step counts (bench/device_event_cost.sh): the difference per step, divided by the events of
// a step, is the cost of one event.
//
// The step is shaped like the ResNet-like training step of bench/python/overhead.py on an H200:
// LONG_LIVED blocks (parameters, gradients, optimizer state) made before the loop and kept, then
// per step PER_STEP blocks made and freed again (each free requested, then completed), at the same
// addresses every step as the caching allocator reuses its cached blocks, in 20 MiB segments.
// With MEMSEAL_BENCH_DETECTOR=1 the default leak detector runs instead of a bare tracker, and its
// step() ends each step: what a GPU loop's step boundary costs. With MEMSEAL_BENCH_OOM=1 a request
// of the whole device then runs out, and the time the out-of-memory's forensics took (its replay
// of the kept block events under four allocator settings included) is printed: what the failing
// allocation waits, under the allocator's lock.
//   memseal_bench_device_events STEPS [PER_STEP [LONG_LIVED]]
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "memseal/leak_detector.h"
#include "memseal/tracker.h"
#include "report/cuda_oom.h"
#include "track/device_events.h"

using namespace memseal;
using track::DeviceEventKind;
using track::DeviceMemoryEvent;

namespace {

constexpr std::uint64_t kSegmentBytes = 20ull << 20;
constexpr std::uint64_t kBaseAddress = 0x7f0000000000ull;

struct Layout {
  std::vector<std::uint64_t> segments;                              // start addresses
  std::vector<std::pair<std::uint64_t, std::uint64_t>> long_lived;  // address, bytes
  std::vector<std::pair<std::uint64_t, std::uint64_t>> per_step;
};

// Blocks of 8 KiB .. 1 MiB packed into segments in order; a new segment when one is full.
Layout makeLayout(int per_step, int long_lived) {
  Layout layout;
  std::uint64_t cursor = 0;
  std::uint64_t segment_end = 0;
  auto place = [&](std::uint64_t bytes) {
    if (cursor + bytes > segment_end) {
      cursor = kBaseAddress + layout.segments.size() * 2 * kSegmentBytes;
      layout.segments.push_back(cursor);
      segment_end = cursor + kSegmentBytes;
    }
    std::uint64_t address = cursor;
    cursor += bytes;
    return address;
  };
  for (int i = 0; i < long_lived; ++i) {
    std::uint64_t bytes = (8ull << 10) << (i % 8);
    layout.long_lived.emplace_back(place(bytes), bytes);
  }
  for (int i = 0; i < per_step; ++i) {
    std::uint64_t bytes = (8ull << 10) << (i % 8);
    layout.per_step.emplace_back(place(bytes), bytes);
  }
  return layout;
}

void send(DeviceEventKind kind, std::uint64_t address, std::uint64_t bytes) {
  DeviceMemoryEvent event;
  event.kind = kind;
  event.address = address;
  event.bytes = bytes;
  track::recordDeviceEvent(event);
}

// A request larger than the device after the steps: the forensics file is written to a folder of
// its own, timed and removed.
void timeOutOfMemory(const Layout& layout) {
  char folder[] = "/tmp/memseal-bench-oom-XXXXXX";
  if (mkdtemp(folder) == nullptr) return;
  report::installOutOfMemoryWriter();
  setenv("MEMSEAL_OOM_DIR", folder, 1);
  DeviceMemoryEvent oom;
  oom.kind = DeviceEventKind::kOutOfMemory;
  oom.bytes = 2 * kSegmentBytes * layout.segments.size();
  oom.device_free_bytes = kSegmentBytes;
  auto start = std::chrono::steady_clock::now();
  track::recordDeviceEvent(oom);
  double milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::string path = track::lastOomForensicsPath();
  std::printf("out-of-memory forensics: %.1f ms (%s)\n", milliseconds,
              path.empty() ? "not written" : "written");
  if (!path.empty()) std::remove(path.c_str());
  rmdir(folder);
  unsetenv("MEMSEAL_OOM_DIR");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s STEPS [PER_STEP [LONG_LIVED]]\n", argv[0]);
    return 2;
  }
  int steps = std::atoi(argv[1]);
  int per_step = argc > 2 ? std::atoi(argv[2]) : 287;
  int long_lived = argc > 3 ? std::atoi(argv[3]) : 500;
  if (steps < 0 || per_step < 0 || long_lived < 0) {
    std::fprintf(stderr, "STEPS, PER_STEP and LONG_LIVED are counts (0 or more)\n");
    return 2;
  }
  Layout layout = makeLayout(per_step, long_lived);

  // As the detector runs on the steps whose ops are not watched: no stacks, no op callback.
  TrackerOptions options;
  options.stacks = StackMode::kOff;
  options.watch_ops = OpWatching::off();
  std::unique_ptr<Tracker> tracker;
  std::unique_ptr<LeakDetector> detector;
  const char* with_detector = std::getenv("MEMSEAL_BENCH_DETECTOR");
  if (with_detector != nullptr && std::string(with_detector) == "1") {
    DetectorOptions detector_options;
    detector_options.on_leak = ReportPolicy::kNone;
    detector = std::make_unique<LeakDetector>(detector_options);
  } else {
    tracker = std::make_unique<Tracker>(options);
    tracker->start();
  }
  for (std::uint64_t segment : layout.segments) {
    send(DeviceEventKind::kSegmentAlloc, segment, kSegmentBytes);
  }
  for (const auto& [address, bytes] : layout.long_lived) {
    send(DeviceEventKind::kBlockAlloc, address, bytes);
  }
  for (int step = 0; step < steps; ++step) {
    for (const auto& [address, bytes] : layout.per_step) {
      send(DeviceEventKind::kBlockAlloc, address, bytes);
    }
    for (const auto& [address, bytes] : layout.per_step) {
      send(DeviceEventKind::kBlockFreeRequested, address, bytes);
      send(DeviceEventKind::kBlockFreeCompleted, address, bytes);
    }
    if (detector) {
      detector->step();
    } else {
      setStep(static_cast<std::uint32_t>(step + 1));
    }
  }
  const char* with_oom = std::getenv("MEMSEAL_BENCH_OOM");
  if (with_oom != nullptr && std::string(with_oom) == "1") timeOutOfMemory(layout);
  std::uint64_t unmatched = 0;
  track::readDeviceLedger(
      [&](const track::DeviceMemoryLedger& ledger) { unmatched = ledger.unmatchedEvents(); });
  LeakReport report;
  if (detector) report = detector->finish();
  if (tracker) tracker->stop();
  if (report.leak) {
    std::fprintf(stderr, "the detector found a leak in a loop that keeps nothing\n");
    return 1;
  }
  if (unmatched != 0) {
    std::fprintf(stderr, "%llu events matched nothing: the synthetic step is wrong\n",
                 static_cast<unsigned long long>(unmatched));
    return 1;
  }
  std::printf("%d steps, %d events per step\n", steps, per_step * 3);
  return 0;
}
