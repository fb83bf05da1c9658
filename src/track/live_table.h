// The table of live allocations, keyed by data pointer. Sharded by address so that threads rarely
// share a lock; each shard is an open-addressing table that grows by doubling. A shard keeps its
// keys apart from its records: a probe, a deletion's shift and the census read eight keys to a
// cache line instead of one 136-byte record's first line per slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "common/branch_hints.h"
#include "common/no_destructor.h"
#include "track/hashing.h"
#include "track/live_record.h"
#include "track/spin_lock.h"

namespace memseal::track {

class LiveTable {
 public:
  static constexpr std::size_t kShards = 64;

  constexpr LiveTable() = default;
  LiveTable(const LiveTable&) = delete;
  LiveTable& operator=(const LiveTable&) = delete;
  ~LiveTable();

  // Returns false only if memory for growing the table could not be had. A record already there
  // for the same address (freed while no hook saw it) is replaced, and copied to `replaced` when
  // given (its `data` stays null when there was none).
  bool insert(const LiveRecord& record, LiveRecord* replaced = nullptr);
  // Inserts as `insert` does, the record written by `fill(LiveRecord&)` in its slot under the
  // shard's lock: the allocation hook builds its record there rather than on the stack and then
  // copies it. The slot holds whatever was there before: `fill` writes every field, `data` (the
  // key) included, and must not call out (the lock is held).
  template <typename Fill>
  [[gnu::always_inline]] inline bool insertWith(void* data, Fill&& fill,
                                                LiveRecord* replaced = nullptr);
  // Moves the record for `data` into `out` and removes it; false when not present.
  bool remove(void* data, LiveRecord* out) {
    return removeWith(data, [out](const LiveRecord& record) { *out = record; });
  }
  // Calls `take(const LiveRecord&)` under the shard's lock, then removes the record; false when
  // not present. For a caller that needs a few fields, not a copy of the whole record.
  template <typename Take>
  bool removeWith(void* data, Take&& take);
  // Removes the record for `data` if `take(const LiveRecord&)`, called under the shard's lock,
  // returns true; returns whether it was removed. One lookup where a check and a removal would
  // take two.
  template <typename Take>
  bool removeIf(void* data, Take&& take);
  // Calls `update(record)` under the shard's lock if `data` is present.
  template <typename Update>
  bool update(void* data, Update&& update);
  // Calls `visit(const LiveRecord&)` for every record, one shard locked at a time. `visit` must not
  // free tensors (that would re-enter this table); collect what you need and act after.
  template <typename Visit>
  void forEach(Visit&& visit) const;

  std::size_t size() const;
  // Bytes the table itself holds (slots of every shard), to measure the tracker's own cost.
  std::size_t memoryBytes() const;

 private:
  struct alignas(64) Shard {
    mutable SpinLock mutex;
    // One allocation: `capacity` keys (nullptr marks an empty slot), then `capacity` records. A
    // record is meaningful only where its key is set, and its `data` equals the key.
    void** keys = nullptr;
    LiveRecord* records = nullptr;
    std::size_t capacity = 0;  // a power of two, or 0 before the first insert
    std::size_t size = 0;
    // The size at which the next insert grows the table first (70% of `capacity`, 0 before the
    // first insert): kept, so that an insertion compares once rather than multiplies twice.
    std::size_t grow_at = 0;
  };

  static std::uint64_t hashPointer(const void* data) {
    return mixBits(reinterpret_cast<std::uintptr_t>(data));
  }
  Shard& shardFor(std::uint64_t hash) { return shards_[hash >> 58]; }
  // The slot holding `data`, or else the empty slot that ends its probe run (where it would go).
  // The shard must have slots.
  static std::size_t probe(const Shard& shard, const void* data, std::uint64_t hash) {
    std::size_t mask = shard.capacity - 1;
    std::size_t slot = hash & mask;
    while (shard.keys[slot] != data && shard.keys[slot] != nullptr) slot = (slot + 1) & mask;
    return slot;
  }
  // The slot holding `data`, or kNoSlot.
  static constexpr std::size_t kNoSlot = ~std::size_t{0};
  static std::size_t findSlot(const Shard& shard, const void* data, std::uint64_t hash) {
    // Empty slots hold a null key, so a null pointer must never be looked up.
    if (shard.capacity == 0 || data == nullptr) return kNoSlot;
    std::size_t slot = probe(shard, data, hash);
    return shard.keys[slot] == data ? slot : kNoSlot;
  }
  static bool grow(Shard& shard);
  static std::size_t slotSlowly(Shard& shard, const void* data, std::uint64_t hash,
                                LiveRecord* replaced);
  // Empties `slot`, keeping the probe runs through it intact.
  static void vacate(Shard& shard, std::size_t slot);
  // Calls `act(shard, slot)` under the shard's lock if `data` is present.
  template <typename Act>
  bool withRecord(void* data, Act&& act);

  Shard shards_[kShards];
};

template <typename Fill>
bool LiveTable::insertWith(void* data, Fill&& fill, LiveRecord* replaced) {
  if (MEMSEAL_UNLIKELY(data == nullptr)) return false;  // the empty slot's key
  std::uint64_t hash = hashPointer(data);
  Shard& shard = shardFor(hash);
  std::lock_guard<SpinLock> lock(shard.mutex);
  // One probe finds either the address (a pointer freed behind our back, by raw_deallocate after
  // the hook was removed, left a stale record: the new one replaces it rather than shadowing it)
  // or the empty slot the record goes to. Grow at 70% load to keep probe sequences short.
  std::size_t slot = kNoSlot;
  if (MEMSEAL_LIKELY(shard.size < shard.grow_at)) {
    slot = probe(shard, data, hash);
    if (MEMSEAL_UNLIKELY(shard.keys[slot] == data)) slot = kNoSlot;
  }
  if (MEMSEAL_UNLIKELY(slot == kNoSlot)) {
    slot = slotSlowly(shard, data, hash, replaced);
    if (slot == kNoSlot) return false;
  }
  shard.keys[slot] = data;
  fill(shard.records[slot]);
  ++shard.size;
  return true;
}

template <typename Act>
bool LiveTable::withRecord(void* data, Act&& act) {
  std::uint64_t hash = hashPointer(data);
  Shard& shard = shardFor(hash);
  std::lock_guard<SpinLock> lock(shard.mutex);
  std::size_t slot = findSlot(shard, data, hash);
  if (slot == kNoSlot) return false;
  act(shard, slot);
  return true;
}

template <typename Update>
bool LiveTable::update(void* data, Update&& update) {
  return withRecord(data, [&](Shard& shard, std::size_t slot) { update(shard.records[slot]); });
}

template <typename Take>
bool LiveTable::removeWith(void* data, Take&& take) {
  return withRecord(data, [&](Shard& shard, std::size_t slot) {
    take(static_cast<const LiveRecord&>(shard.records[slot]));
    vacate(shard, slot);
  });
}

template <typename Take>
bool LiveTable::removeIf(void* data, Take&& take) {
  bool removed = false;
  withRecord(data, [&](Shard& shard, std::size_t slot) {
    if (!take(static_cast<const LiveRecord&>(shard.records[slot]))) return;
    vacate(shard, slot);
    removed = true;
  });
  return removed;
}

template <typename Visit>
void LiveTable::forEach(Visit&& visit) const {
  // A loop's census runs while few records are live in a table sized for its peak: it reads the
  // keys, and a record only where one is set. A shard is left once all its records were seen (an
  // empty one at once).
  for (const Shard& shard : shards_) {
    std::lock_guard<SpinLock> lock(shard.mutex);
    std::size_t left = shard.size;
    for (std::size_t i = 0; left != 0 && i < shard.capacity; ++i) {
      if (shard.keys[i] == nullptr) continue;
      --left;
      visit(static_cast<const LiveRecord&>(shard.records[i]));
    }
  }
}

// The live allocations of every session (records carry their session), never destroyed: tensors
// may be freed at any time, even during static destruction.
extern NoDestructor<LiveTable> g_live_allocations;
inline LiveTable& liveAllocations() { return g_live_allocations.get(); }

}  // namespace memseal::track
