// The device events of a running MemoryTrace: a ring of fixed capacity that keeps the newest and
// counts what it dropped. Pushed under the device ledger's lock, which the CUDA caching allocator's
// trace hook holds its own lock around, so a push never allocates past the first lap (the storage
// is reserved when the trace starts; its pages are touched only as events arrive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "track/device_ledger.h"

namespace memseal::track {

class DeviceEventRing {
 public:
  // Keeps the newest `capacity` events (at least 1).
  explicit DeviceEventRing(std::size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {
    events_.reserve(capacity_);
  }

  void push(const track::DeviceMemoryEvent& event) {
    if (events_.size() < capacity_) {
      events_.push_back(event);
      return;
    }
    events_[oldest_] = event;
    oldest_ = (oldest_ + 1) % capacity_;
    ++dropped_;
  }

  // Forgets what it holds (counted as dropped) and keeps its storage.
  void clear() {
    dropped_ += events_.size();
    events_.clear();
    oldest_ = 0;
  }

  // Oldest first.
  std::vector<track::DeviceMemoryEvent> events() const {
    std::vector<track::DeviceMemoryEvent> ordered;
    ordered.reserve(events_.size());
    for (std::size_t i = 0; i < events_.size(); ++i) {
      ordered.push_back(events_[(oldest_ + i) % events_.size()]);
    }
    return ordered;
  }
  std::uint64_t dropped() const { return dropped_; }
  std::size_t capacity() const { return capacity_; }

 private:
  std::size_t capacity_;
  std::vector<track::DeviceMemoryEvent> events_;
  std::size_t oldest_ = 0;  // index of the oldest event once the ring is full
  std::uint64_t dropped_ = 0;
};

}  // namespace memseal::track
