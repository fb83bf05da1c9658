// Device events kept in order: a ring of fixed capacity that keeps the newest and counts what it
// dropped. The events of a running MemoryTrace, and the recent block events an out-of-memory's
// replay needs. Pushed under the device ledger's lock, which the CUDA caching allocator's trace
// hook holds its own lock around, so a push never allocates (the storage is reserved when the ring
// is made; its pages are touched only as events arrive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "track/device_ledger.h"

namespace memseal::track {

template <typename Event>
class EventRing {
 public:
  // Keeps the newest `capacity` events (at least 1).
  explicit EventRing(std::size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {
    events_.reserve(capacity_);
  }

  void push(const Event& event) {
    if (events_.size() < capacity_) {
      events_.push_back(event);
      return;
    }
    events_[oldest_] = event;
    if (++oldest_ == capacity_) oldest_ = 0;  // no division on the allocator's path
    ++dropped_;
  }

  // Forgets what it holds (counted as dropped) and keeps its storage.
  void clear() {
    dropped_ += events_.size();
    events_.clear();
    oldest_ = 0;
  }

  // Starts again: holds nothing and has dropped nothing; keeps its storage.
  void restart() {
    events_.clear();
    oldest_ = 0;
    dropped_ = 0;
  }

  // Oldest first.
  std::vector<Event> events() const {
    std::vector<Event> ordered;
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
  std::vector<Event> events_;
  std::size_t oldest_ = 0;  // index of the oldest event once the ring is full
  std::uint64_t dropped_ = 0;
};

using DeviceEventRing = EventRing<track::DeviceMemoryEvent>;

}  // namespace memseal::track
