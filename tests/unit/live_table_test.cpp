// The live table: insert/find/remove under heavy churn, growth, and probe-run repair on removal.
#include "track/live_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

namespace memseal::track {
namespace {

LiveRecord recordAt(std::uintptr_t address, std::size_t bytes) {
  LiveRecord record;
  record.data = reinterpret_cast<void*>(address);
  record.bytes = bytes;
  return record;
}

TEST(LiveTable, InsertThenRemoveReturnsTheRecord) {
  LiveTable table;
  ASSERT_TRUE(table.insert(recordAt(0x1000, 64)));
  EXPECT_EQ(table.size(), 1u);
  LiveRecord out;
  ASSERT_TRUE(table.remove(reinterpret_cast<void*>(0x1000), &out));
  EXPECT_EQ(out.bytes, 64u);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.remove(reinterpret_cast<void*>(0x1000), &out));
}

TEST(LiveTable, NullIsNeverFoundEvenThoughEmptySlotsHoldIt) {
  LiveTable table;
  table.insert(recordAt(0x40, 1));
  LiveRecord out;
  EXPECT_FALSE(table.remove(nullptr, &out));
  EXPECT_FALSE(table.update(nullptr, [](LiveRecord&) {}));
  EXPECT_EQ(table.size(), 1u);
}

TEST(LiveTable, UpdateChangesOnlyTheNamedRecord) {
  LiveTable table;
  table.insert(recordAt(0x40, 1));
  table.insert(recordAt(0x80, 2));
  EXPECT_TRUE(table.update(reinterpret_cast<void*>(0x40), [](LiveRecord& r) { r.step = 7; }));
  EXPECT_FALSE(table.update(reinterpret_cast<void*>(0xc0), [](LiveRecord& r) { r.step = 9; }));
  std::unordered_map<std::uintptr_t, std::uint32_t> steps;
  table.forEach(
      [&](const LiveRecord& r) { steps[reinterpret_cast<std::uintptr_t>(r.data)] = r.step; });
  EXPECT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0x40], 7u);
  EXPECT_EQ(steps[0x80], 0u);
}

TEST(LiveTable, InsertOverAStaleRecordHandsTheOldOneBack) {
  LiveTable table;
  LiveRecord replaced;
  ASSERT_TRUE(table.insert(recordAt(0x40, 1), &replaced));
  EXPECT_EQ(replaced.data, nullptr);  // nothing was there
  ASSERT_TRUE(table.insert(recordAt(0x40, 2), &replaced));
  EXPECT_EQ(replaced.data, reinterpret_cast<void*>(0x40));
  EXPECT_EQ(replaced.bytes, 1u);
  EXPECT_EQ(table.size(), 1u);
  LiveRecord out;
  ASSERT_TRUE(table.remove(reinterpret_cast<void*>(0x40), &out));
  EXPECT_EQ(out.bytes, 2u);
}

TEST(LiveTable, RemoveIfRemovesOnlyWhatTheCheckAccepts) {
  LiveTable table;
  table.insert(recordAt(0x40, 1));
  table.insert(recordAt(0x80, 2));
  std::size_t seen_bytes = 0;
  EXPECT_FALSE(table.removeIf(reinterpret_cast<void*>(0x40), [&](const LiveRecord& r) {
    seen_bytes = r.bytes;
    return false;
  }));
  EXPECT_EQ(seen_bytes, 1u);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_TRUE(
      table.removeIf(reinterpret_cast<void*>(0x80), [](const LiveRecord&) { return true; }));
  EXPECT_FALSE(
      table.removeIf(reinterpret_cast<void*>(0xc0), [](const LiveRecord&) { return true; }));
  EXPECT_EQ(table.size(), 1u);
  LiveRecord out;
  EXPECT_TRUE(table.remove(reinterpret_cast<void*>(0x40), &out));
}

// Random churn against a reference map: after every operation, the table holds exactly the
// reference's records (this exercises growth and backward-shift deletion in long probe runs).
TEST(LiveTable, MatchesAReferenceMapUnderRandomChurn) {
  LiveTable table;
  std::unordered_map<std::uintptr_t, std::size_t> reference;
  std::vector<std::uintptr_t> keys;
  std::mt19937_64 random(42);
  for (int operation = 0; operation < 200000; ++operation) {
    bool insert = keys.empty() || random() % 100 < 55;
    if (insert) {
      std::uintptr_t address = (random() % (1u << 22)) * 64 + 64;
      if (reference.count(address) != 0) continue;
      std::size_t bytes = random() % 4096;
      ASSERT_TRUE(table.insert(recordAt(address, bytes)));
      reference[address] = bytes;
      keys.push_back(address);
    } else {
      std::size_t index = random() % keys.size();
      std::uintptr_t address = keys[index];
      keys[index] = keys.back();
      keys.pop_back();
      LiveRecord out;
      ASSERT_TRUE(table.remove(reinterpret_cast<void*>(address), &out));
      ASSERT_EQ(out.bytes, reference[address]);
      reference.erase(address);
    }
  }
  EXPECT_EQ(table.size(), reference.size());
  std::size_t seen = 0;
  table.forEach([&](const LiveRecord& r) {
    auto found = reference.find(reinterpret_cast<std::uintptr_t>(r.data));
    ASSERT_NE(found, reference.end());
    EXPECT_EQ(found->second, r.bytes);
    ++seen;
  });
  EXPECT_EQ(seen, reference.size());
  for (std::uintptr_t address : keys) {
    LiveRecord out;
    ASSERT_TRUE(table.remove(reinterpret_cast<void*>(address), &out));
  }
  EXPECT_EQ(table.size(), 0u);
}

// A census scans a table that grew for its peak and then emptied: every record left, wherever its
// shard keeps it, and a replaced stale record counted once.
TEST(LiveTable, ForEachSeesEveryRecordLeftAfterThePeak) {
  LiveTable table;
  std::vector<std::uintptr_t> addresses;
  for (std::uintptr_t i = 1; i <= 4000; ++i) addresses.push_back(i * 64);
  for (std::uintptr_t address : addresses) ASSERT_TRUE(table.insert(recordAt(address, 1)));
  std::mt19937_64 random(7);
  std::shuffle(addresses.begin(), addresses.end(), random);
  std::set<std::uintptr_t> kept(addresses.begin(), addresses.begin() + 9);
  for (std::uintptr_t address : addresses) {
    if (kept.count(address) != 0) continue;
    LiveRecord out;
    ASSERT_TRUE(table.remove(reinterpret_cast<void*>(address), &out));
  }
  // A second record for a kept address replaces the first (a free the hook did not see).
  ASSERT_TRUE(table.insert(recordAt(*kept.begin(), 2)));
  std::multiset<std::uintptr_t> seen;
  std::size_t replaced_bytes = 0;
  table.forEach([&](const LiveRecord& r) {
    seen.insert(reinterpret_cast<std::uintptr_t>(r.data));
    if (reinterpret_cast<std::uintptr_t>(r.data) == *kept.begin()) replaced_bytes = r.bytes;
  });
  EXPECT_EQ(seen, std::multiset<std::uintptr_t>(kept.begin(), kept.end()));
  EXPECT_EQ(replaced_bytes, 2u);
  EXPECT_EQ(table.size(), kept.size());
}

}  // namespace
}  // namespace memseal::track
