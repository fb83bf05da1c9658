// Synthetic CUDA caching-allocator event streams for the device tests: events sent the way the
// allocator's trace hooks would, numbering steps as they go.
#pragma once

#include <cstdint>
#include <string>

#include "detect/device_diagnosis.h"
#include "track/device_ledger.h"

namespace memseal::test {

using namespace track;   // NOLINT: the ledger and its events
using namespace detect;  // NOLINT: the diagnosis

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

inline bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// 32 segments of 20 MiB, each pinned by a 1 MiB long-lived block at 8 MiB, leaving gaps of 8 and
// 11 MiB; 100 MiB of weights (site 1) in a segment of their own. Sites 7 and 3 pin the segments.
inline void buildFragmentedPool(Replay& replay) {
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

}  // namespace memseal::test
