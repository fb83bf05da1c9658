#include "explain/device_step_watch.h"

#include "track/device_events.h"

namespace memseal::explain {

DeviceStepWatch::DeviceStepWatch(std::uint32_t step, std::size_t capacity) : step_(step) {
  if (!track::deviceEventsSeen() && !track::cudaAllocatorTraceAttached()) return;
  track::readDeviceLedger([&](const track::DeviceMemoryLedger& ledger) {
    for (int device : ledger.devices()) {
      DeviceStepEvents& start = of(device);
      start.blocks_at_start = ledger.occupiedBlocks(device);
      start.reserved_at_start = ledger.totals(device).reserved;
    }
  });
  track::startDeviceEventTrace(capacity);
  watching_ = true;
}

DeviceStepWatch::~DeviceStepWatch() {
  if (watching_) track::stopDeviceEventTrace();
}

std::vector<DeviceStepEvents> DeviceStepWatch::stop() {
  if (!watching_) return {};
  watching_ = false;
  track::DeviceTraceContents contents = track::stopDeviceEventTrace();
  for (const track::DeviceMemoryEvent& event : contents.events) {
    of(event.device).events.push_back(event);
  }
  for (DeviceStepEvents& device : devices_) device.dropped_events = contents.dropped;
  return std::move(devices_);
}

DeviceStepEvents& DeviceStepWatch::of(int device) {
  for (DeviceStepEvents& each : devices_) {
    if (each.device == device) return each;
  }
  devices_.emplace_back();
  devices_.back().device = device;
  devices_.back().step = step_;
  return devices_.back();
}

}  // namespace memseal::explain
