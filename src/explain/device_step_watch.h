// The CUDA devices' side of a measured step (explain's peaks, fit's sizes): the blocks occupied
// when it began and the segments reserved then, read from the device ledger, then the caching
// allocator's events while it ran. A process that never used CUDA starts nothing here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "explain/device_peak.h"

namespace memseal::explain {

class DeviceStepWatch {
 public:
  // Keeps at most `capacity` events of the step (the newest; the rest are counted as dropped).
  DeviceStepWatch(std::uint32_t step, std::size_t capacity);
  DeviceStepWatch(const DeviceStepWatch&) = delete;
  DeviceStepWatch& operator=(const DeviceStepWatch&) = delete;
  ~DeviceStepWatch();

  // Each device's events of the step, in order (a device first seen in the step starts empty).
  std::vector<DeviceStepEvents> stop();

 private:
  DeviceStepEvents& of(int device);

  std::vector<DeviceStepEvents> devices_;
  std::uint32_t step_ = 0;
  bool watching_ = false;
};

}  // namespace memseal::explain
