// One thread's allocations of the last watched step, in order, for ops watched on some steps only
// (OpWatching): the steps in between are attributed by replaying it instead
// of paying at::RecordFunction on every op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "track/live_record.h"

namespace memseal::track {

struct SequenceEntry {
  std::size_t bytes;
  std::uint32_t site;
  std::uint32_t scope_path;   // the MEMSEAL_REGION path it was made in
  TensorSignature signature;  // filled in when the op that made it returns
};

// Plain storage that grows by doubling with realloc: the tracker must not allocate through the
// allocator it tracks, and a step's sequence is rebuilt in place on every watched step.
class AllocationSequence {
 public:
  // A step with more allocations on one thread is replayed up to here only.
  static constexpr std::uint32_t kMaxEntries = 1u << 16;

  constexpr AllocationSequence() = default;
  ~AllocationSequence() {
    std::free(entries_);
    entries_ = nullptr;
    size_ = capacity_ = 0;
    closed_ = true;  // the thread is exiting: allocations made after this are not recorded
  }
  AllocationSequence(const AllocationSequence&) = delete;
  AllocationSequence& operator=(const AllocationSequence&) = delete;

  std::uint32_t size() const { return size_; }
  void clear() { size_ = 0; }
  // False when full or out of memory: the recording ends there.
  bool append(const SequenceEntry& entry) {
    if (closed_) return false;
    if (size_ == capacity_) {
      if (capacity_ >= kMaxEntries) return false;
      std::uint32_t grown = capacity_ == 0 ? 256 : capacity_ * 2;
      void* moved = std::realloc(entries_, sizeof(SequenceEntry) * grown);
      if (moved == nullptr) return false;
      entries_ = static_cast<SequenceEntry*>(moved);
      capacity_ = grown;
    }
    entries_[size_++] = entry;
    return true;
  }
  SequenceEntry* at(std::uint64_t index) { return index < size_ ? &entries_[index] : nullptr; }

 private:
  SequenceEntry* entries_ = nullptr;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = 0;
  bool closed_ = false;
};

}  // namespace memseal::track
