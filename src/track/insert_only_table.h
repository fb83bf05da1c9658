// A fixed-capacity hash table that is only ever inserted into: lookups take no lock, inserts of a
// key not seen before take one mutex. Used for sites, interned strings and stacks, which are few
// and seen again and again, so the hot path almost always finds its entry without locking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace memseal::track {

// Entry must provide `bool matches(const Key&) const` and be default constructible. Ids are
// slot + 1, so 0 means "no entry" (the table was full: the caller files it under an overflow id).
template <typename Entry, std::size_t Capacity>
class InsertOnlyTable {
  static_assert((Capacity & (Capacity - 1)) == 0, "capacity must be a power of two");

 public:
  InsertOnlyTable()
      : hashes_(new std::atomic<std::uint64_t>[Capacity]), entries_(new Entry[Capacity]) {
    for (std::size_t i = 0; i < Capacity; ++i) hashes_[i].store(0, std::memory_order_relaxed);
  }

  template <typename Key, typename Init>
  std::uint32_t findOrInsert(std::uint64_t hash, const Key& key, Init&& init) {
    hash |= 1;  // 0 marks an empty slot
    std::uint32_t found = find(hash, key);
    if (found != 0) return found;
    std::lock_guard<std::mutex> lock(insert_mutex_);
    // Full when 3/4 used: probing stays short and the table never fills up completely.
    for (std::size_t probe = 0, slot = hash & (Capacity - 1); probe < Capacity;
         ++probe, slot = (slot + 1) & (Capacity - 1)) {
      std::uint64_t seen = hashes_[slot].load(std::memory_order_acquire);
      if (seen == hash && entries_[slot].matches(key)) return static_cast<std::uint32_t>(slot + 1);
      if (seen != 0) continue;
      if (size_ * 4 >= Capacity * 3) return 0;
      init(entries_[slot]);
      ++size_;
      hashes_[slot].store(hash, std::memory_order_release);  // publishes the entry
      return static_cast<std::uint32_t>(slot + 1);
    }
    return 0;
  }

  template <typename Key>
  std::uint32_t find(std::uint64_t hash, const Key& key) const {
    hash |= 1;
    for (std::size_t probe = 0, slot = hash & (Capacity - 1); probe < Capacity;
         ++probe, slot = (slot + 1) & (Capacity - 1)) {
      std::uint64_t seen = hashes_[slot].load(std::memory_order_acquire);
      if (seen == 0) return 0;
      if (seen == hash && entries_[slot].matches(key)) return static_cast<std::uint32_t>(slot + 1);
    }
    return 0;
  }

  // Only valid for ids returned by findOrInsert/find (published entries).
  Entry& at(std::uint32_t id) { return entries_[id - 1]; }
  const Entry& at(std::uint32_t id) const { return entries_[id - 1]; }

  template <typename Visit>
  void forEach(Visit&& visit) {
    for (std::size_t slot = 0; slot < Capacity; ++slot) {
      if (hashes_[slot].load(std::memory_order_acquire) != 0) {
        visit(static_cast<std::uint32_t>(slot + 1), entries_[slot]);
      }
    }
  }

  static constexpr std::size_t capacity() { return Capacity; }

 private:
  std::unique_ptr<std::atomic<std::uint64_t>[]> hashes_;
  std::unique_ptr<Entry[]> entries_;
  std::mutex insert_mutex_;
  std::size_t size_ = 0;
};

}  // namespace memseal::track
