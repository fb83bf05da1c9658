// Site, string and stack deduplication: the same key always gets the same id, different keys
// different ids, and a full table says so with id 0 instead of overwriting.
#include "track/insert_only_table.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "track/hashing.h"

namespace memseal::track {
namespace {

struct IntEntry {
  int value = -1;
  bool matches(int key) const { return value == key; }
};

std::uint32_t intern(InsertOnlyTable<IntEntry, 64>& table, int key, std::uint64_t hash) {
  return table.findOrInsert(hash, key, [&](IntEntry& entry) { entry.value = key; });
}

TEST(InsertOnlyTable, SameKeySameIdDifferentKeysDifferentIds) {
  InsertOnlyTable<IntEntry, 64> table;
  std::uint32_t a = intern(table, 1, mixBits(1));
  std::uint32_t b = intern(table, 2, mixBits(2));
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(intern(table, 1, mixBits(1)), a);
  EXPECT_EQ(table.at(a).value, 1);
  EXPECT_EQ(table.find(mixBits(2), 2), b);
  EXPECT_EQ(table.find(mixBits(3), 3), 0u);
}

TEST(InsertOnlyTable, CollidingHashesAreToldApartByTheirKeys) {
  InsertOnlyTable<IntEntry, 64> table;
  std::uint32_t a = intern(table, 10, 12345);
  std::uint32_t b = intern(table, 20, 12345);
  EXPECT_NE(a, b);
  EXPECT_EQ(table.at(a).value, 10);
  EXPECT_EQ(table.at(b).value, 20);
}

TEST(InsertOnlyTable, FullTableReturnsZeroAndKeepsExistingEntries) {
  InsertOnlyTable<IntEntry, 64> table;
  std::vector<std::uint32_t> ids;
  for (int key = 0; key < 48; ++key) ids.push_back(intern(table, key, mixBits(key)));
  for (std::uint32_t id : ids) EXPECT_NE(id, 0u);
  EXPECT_EQ(intern(table, 1000, mixBits(1000)), 0u);
  for (int key = 0; key < 48; ++key) EXPECT_EQ(intern(table, key, mixBits(key)), ids[key]);
}

TEST(InsertOnlyTable, ConcurrentInsertsOfTheSameKeysAgree) {
  InsertOnlyTable<IntEntry, 1024> table;
  std::vector<std::vector<std::uint32_t>> ids(4, std::vector<std::uint32_t>(500));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int key = 0; key < 500; ++key) {
        ids[t][key] = table.findOrInsert(mixBits(key), key, [&](IntEntry& e) { e.value = key; });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<std::uint32_t> distinct(ids[0].begin(), ids[0].end());
  EXPECT_EQ(distinct.size(), 500u);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(ids[t], ids[0]);
}

}  // namespace
}  // namespace memseal::track
