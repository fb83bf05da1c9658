// Open addressing with linear probing and backward-shift deletion (no tombstones), so a table that
// sees millions of allocate/free pairs never degrades. Slots come from calloc, never from the
// allocator being tracked.
#include "track/live_table.h"

#include <cstdlib>

#include "common/branch_hints.h"

namespace memseal::track {

NoDestructor<LiveTable> g_live_allocations;

namespace {
// Small: the census reads a shard's slots up to its last record, empty ones on the way included.
constexpr std::size_t kInitialShardCapacity = 16;
}  // namespace

LiveTable::~LiveTable() {
  for (Shard& shard : shards_) std::free(shard.keys);
}

bool LiveTable::grow(Shard& shard) {
  std::size_t capacity = shard.capacity == 0 ? kInitialShardCapacity : shard.capacity * 2;
  // Keys and records in one block; calloc leaves every key null (empty).
  void* block = std::calloc(capacity, sizeof(void*) + sizeof(LiveRecord));
  if (block == nullptr) return false;
  auto* keys = static_cast<void**>(block);
  auto* records = reinterpret_cast<LiveRecord*>(keys + capacity);
  std::size_t mask = capacity - 1;
  for (std::size_t i = 0; i < shard.capacity; ++i) {
    void* key = shard.keys[i];
    if (key == nullptr) continue;
    std::size_t slot = hashPointer(key) & mask;
    while (keys[slot] != nullptr) slot = (slot + 1) & mask;
    keys[slot] = key;
    records[slot] = shard.records[i];
  }
  std::free(shard.keys);
  shard.keys = keys;
  shard.records = records;
  shard.capacity = capacity;
  shard.grow_at = capacity * 7 / 10;
  return true;
}

// The slot a new record for `data` goes to, when it is not the common case (an empty slot in a
// table below its load limit): the table grows first, or a stale record is handed back. Out of
// line, so that an insertion's code is one probe and the record's writing. kNoSlot when the table
// could not grow.
[[gnu::cold, gnu::noinline]] std::size_t LiveTable::slotSlowly(Shard& shard, const void* data,
                                                               std::uint64_t hash,
                                                               LiveRecord* replaced) {
  if (shard.capacity != 0) {
    std::size_t slot = probe(shard, data, hash);
    if (shard.keys[slot] == data) {
      if (replaced != nullptr) *replaced = shard.records[slot];
      --shard.size;  // insert counts it again
      return slot;
    }
  }
  if (!grow(shard)) return kNoSlot;
  return probe(shard, data, hash);  // not in the table: the probe ends on an empty slot
}

MEMSEAL_HOT bool LiveTable::insert(const LiveRecord& record, LiveRecord* replaced) {
  return insertWith(
      record.data, [&record](LiveRecord& slot) { slot = record; }, replaced);
}

MEMSEAL_HOT void LiveTable::vacate(Shard& shard, std::size_t slot) {
  // Backward-shift deletion: pull later members of the probe run into the hole so lookups that
  // stop at the first empty slot stay correct.
  std::size_t mask = shard.capacity - 1;
  std::size_t hole = slot;
  for (std::size_t next = (hole + 1) & mask; shard.keys[next] != nullptr;
       next = (next + 1) & mask) {
    std::size_t home = hashPointer(shard.keys[next]) & mask;
    // Move `next` into the hole unless its home lies cyclically in (hole, next].
    bool home_after_hole =
        hole <= next ? (home > hole && home <= next) : (home > hole || home <= next);
    if (home_after_hole) continue;
    shard.keys[hole] = shard.keys[next];
    shard.records[hole] = shard.records[next];
    hole = next;
  }
  // Only the key marks a slot empty: the next insert writes the whole record.
  shard.keys[hole] = nullptr;
  --shard.size;
}

std::size_t LiveTable::size() const {
  std::size_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<SpinLock> lock(shard.mutex);
    total += shard.size;
  }
  return total;
}

std::size_t LiveTable::memoryBytes() const {
  std::size_t total = sizeof(*this);
  for (const Shard& shard : shards_) {
    std::lock_guard<SpinLock> lock(shard.mutex);
    total += shard.capacity * (sizeof(void*) + sizeof(LiveRecord));
  }
  return total;
}

}  // namespace memseal::track
