// Synthetic CUDA caching-allocator events, as its trace hook would send them (track/
// device_events.h), for the device tests: they run without a GPU. The same on a real GPU, with ops
// and tensors, is in cuda_memory_test.cpp.
#pragma once

#include <cstdint>

#include "integration/detector_helpers.h"
#include "memseal/leak_detector.h"
#include "track/device_events.h"

namespace memseal::test {

using track::DeviceEventKind;
using track::DeviceMemoryEvent;

constexpr std::uint64_t kMiB = 1 << 20;

inline DeviceMemoryEvent event(DeviceEventKind kind, std::uint64_t address, std::uint64_t bytes) {
  DeviceMemoryEvent made;
  made.kind = kind;
  made.address = address;
  made.bytes = bytes;
  return made;
}

// A block handed out and given back in full, as a temporary's is.
inline void allocateAndFree(std::uint64_t address, std::uint64_t bytes) {
  track::recordDeviceEvent(event(DeviceEventKind::kBlockAlloc, address, bytes));
  track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeRequested, address, bytes));
  track::recordDeviceEvent(event(DeviceEventKind::kBlockFreeCompleted, address, bytes));
}

// The detector without resident memory: device tests judge what the events say alone.
inline DetectorOptions quietDeviceDetector() {
  DetectorOptions options = quietDetector();
  options.watch_resident_memory = false;
  return options;
}

}  // namespace memseal::test
