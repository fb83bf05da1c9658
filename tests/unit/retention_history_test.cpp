// Build-ups on their own: memory freed together is told apart from memory given back a little at a
// time, and a group is judged again from the step after its build-up was freed.
#include "detect/retention_history.h"

#include <gtest/gtest.h>

#include <vector>

#include "step_range.h"

namespace memseal::detect {
namespace {

using test::range;

GroupId storageGroup(std::uint32_t site) {
  GroupId id;
  id.key.site = site;
  return id;
}

GroupAtBoundary at(const GroupId& id, const std::vector<std::uint32_t>& steps, bool grows,
                   std::int64_t bytes = 0) {
  GroupAtBoundary group;
  group.id = id;
  group.steps = &steps;
  group.grows = grows;
  group.bytes = bytes;
  group.judged_steps = steps.empty() ? 0 : steps.back() - steps.front() + 1;
  return group;
}

// Steps 5 to 24 each keep 100 bytes of `id`'s, judged growing from step 8 on.
void buildUpFrom5To24(RetentionHistory& history, const GroupId& id) {
  std::vector<std::vector<std::uint32_t>> alive;
  for (std::uint32_t step = 5; step <= 24; ++step) alive.push_back(range(5, step));
  for (std::uint32_t step = 5; step <= 24; ++step) {
    auto collapses =
        history.update({at(id, alive[step - 5], step >= 8, 100 * (step - 4))}, step + 1);
    EXPECT_TRUE(collapses.empty());
  }
  EXPECT_TRUE(history.buildingUp(id));
}

TEST(RetentionHistory, ABuildUpFreedTogetherIsACollapse) {
  RetentionHistory history;
  GroupId id = storageGroup(7);
  buildUpFrom5To24(history, id);
  std::vector<std::uint32_t> none;
  auto collapses = history.update({at(id, none, false)}, 26);
  ASSERT_EQ(collapses.size(), 1u);
  EXPECT_EQ(collapses[0].first_step, 5u);
  EXPECT_EQ(collapses[0].last_step, 24u);
  EXPECT_EQ(collapses[0].freed_by, 26u);
  EXPECT_EQ(collapses[0].peak_bytes, 2000);
  EXPECT_EQ(collapses[0].detected_at, 8u);  // first judged growing after step 8
  EXPECT_FALSE(history.buildingUp(id));
  // The next build-up is judged from the step after the last one it held.
  EXPECT_EQ(history.segmentStart(id), 25u);
}

TEST(RetentionHistory, MemoryGivenBackALittleAtATimeIsNoCollapse) {
  RetentionHistory history;
  GroupId id = storageGroup(3);
  std::vector<std::uint32_t> filling = range(5, 20);
  history.update({at(id, filling, true)}, 21);
  // A bounded cache evicts its oldest entries: most of what it held is still there.
  std::vector<std::uint32_t> evicting = range(9, 24);
  EXPECT_TRUE(history.update({at(id, evicting, false)}, 25).empty());
  EXPECT_FALSE(history.buildingUp(id));
  EXPECT_EQ(history.segmentStart(id), 0u);
}

// A step boundary taken on another thread (time windows) while the program frees the list of
// what it kept: half of the build-up is gone at that update, the rest at the next. Freed together.
TEST(RetentionHistory, ABuildUpFreedAsTheBoundaryCameIsACollapseAtTheNextUpdate) {
  RetentionHistory history;
  GroupId id = storageGroup(7);
  buildUpFrom5To24(history, id);
  std::vector<std::uint32_t> older_half = range(5, 14);  // a list freed from its end
  EXPECT_TRUE(history.update({at(id, older_half, false)}, 26).empty());
  EXPECT_TRUE(history.buildingUp(id));
  std::vector<std::uint32_t> none;
  auto collapses = history.update({at(id, none, false)}, 27);
  ASSERT_EQ(collapses.size(), 1u);
  EXPECT_EQ(collapses[0].first_step, 5u);
  EXPECT_EQ(collapses[0].last_step, 24u);
  EXPECT_EQ(collapses[0].freed_by, 27u);
  EXPECT_EQ(collapses[0].peak_bytes, 2000);
  EXPECT_EQ(collapses[0].segment_start, 0u);
  EXPECT_FALSE(history.buildingUp(id));
}

// Half given back at once and the rest kept: not freed together, forgotten at the next update.
TEST(RetentionHistory, HalfABuildUpFreedAndTheRestKeptIsNoCollapse) {
  RetentionHistory history;
  GroupId id = storageGroup(7);
  std::vector<std::uint32_t> filling = range(5, 24);
  history.update({at(id, filling, true)}, 25);
  std::vector<std::uint32_t> older_half = range(5, 14);
  EXPECT_TRUE(history.update({at(id, older_half, false)}, 26).empty());
  EXPECT_TRUE(history.update({at(id, older_half, false)}, 27).empty());
  EXPECT_FALSE(history.buildingUp(id));
  EXPECT_EQ(history.segmentStart(id), 0u);
}

TEST(RetentionHistory, AShortBuildUpIsForgottenWhenFreed) {
  RetentionHistory history;
  GroupId id = storageGroup(3);
  std::vector<std::uint32_t> few = range(5, 9);  // 5 steps: a loss summed over micro-batches
  history.update({at(id, few, true)}, 10);
  std::vector<std::uint32_t> none;
  EXPECT_TRUE(history.update({at(id, none, false)}, 11).empty());
  EXPECT_EQ(history.segmentStart(id), 10u);
}

TEST(RetentionHistory, ACollapseSinceTheLastBoundaryIsSeenWithoutChangingAnything) {
  RetentionHistory history;
  GroupId id = storageGroup(4);
  id.graph = true;
  std::vector<std::uint32_t> held = range(5, 30);
  history.update({at(id, held, true)}, 31);
  // At exit: the group's survivors are gone, and no group is at the boundary at all.
  auto collapses = history.collapsedSince({}, 31);
  ASSERT_EQ(collapses.size(), 1u);
  EXPECT_TRUE(collapses[0].id.graph);
  EXPECT_TRUE(history.buildingUp(id));
}

TEST(RetentionHistory, GroupsAreFollowedApart) {
  RetentionHistory history;
  GroupId kept = storageGroup(1);
  GroupId reset = storageGroup(2);
  std::vector<std::uint32_t> all = range(5, 20);
  history.update({at(kept, all, true), at(reset, all, true)}, 21);
  std::vector<std::uint32_t> more = range(5, 21);
  std::vector<std::uint32_t> fresh = {21};
  auto collapses = history.update({at(kept, more, true), at(reset, fresh, false)}, 22);
  ASSERT_EQ(collapses.size(), 1u);
  EXPECT_EQ(collapses[0].id, reset);
  EXPECT_TRUE(history.buildingUp(kept));
  EXPECT_EQ(history.segmentStart(kept), 0u);
  EXPECT_EQ(history.segmentStart(reset), 21u);
}

// A cache of `capacity` entries that misses every step from step 5 on: once full, each step's new
// entry evicts the oldest; at `replaced_at` (0: never) the new entry replaces the last one instead.
// Element i holds the steps whose entries are cached after step 5 + i.
std::vector<std::vector<std::uint32_t>> fifoCache(std::size_t capacity, std::uint32_t last_step,
                                                  std::uint32_t replaced_at = 0) {
  std::vector<std::uint32_t> cached;
  std::vector<std::vector<std::uint32_t>> alive;
  for (std::uint32_t step = 5; step <= last_step; ++step) {
    if (step == replaced_at) cached.pop_back();
    cached.push_back(step);
    if (cached.size() > capacity) cached.erase(cached.begin());
    alive.push_back(cached);
  }
  return alive;
}

// Updates `history` every `every` steps with one growing group holding `alive[i]` after step
// 5 + i.
void followEachStep(RetentionHistory& history, const GroupId& id,
                    const std::vector<std::vector<std::uint32_t>>& alive, std::size_t every = 1) {
  for (std::size_t i = 0; i < alive.size(); i += every) {
    history.update({at(id, alive[i], true)}, static_cast<std::uint32_t>(6 + i));
  }
}

TEST(RetentionHistory, ACacheThatEvictsTurnsOver) {
  RetentionHistory history;
  GroupId id = storageGroup(3);
  std::vector<std::vector<std::uint32_t>> alive = fifoCache(20, 120);
  for (std::size_t i = 0; i < alive.size(); ++i) {
    history.update({at(id, alive[i], true, 1000 * static_cast<std::int64_t>(alive[i].size()))},
                   static_cast<std::uint32_t>(6 + i));
    std::uint32_t step = static_cast<std::uint32_t>(5 + i);
    // The first eviction is at step 25: judged only once evictions were seen over
    // kMinTurnoverSteps steps.
    if (step < 24 + RetentionHistory::kMinTurnoverSteps) {
      EXPECT_FALSE(history.turnsOver(id)) << step;
    }
  }
  EXPECT_TRUE(history.turnsOver(id));
  EXPECT_EQ(history.turnoverPeakBytes(), 20000);
}

TEST(RetentionHistory, ACacheThatFillsSlowlyAfterItsFirstEvictionTurnsOverOnceFull) {
  // Step 10 replaces step 9's entry; the cache then fills up to 100 entries.
  std::vector<std::vector<std::uint32_t>> alive = fifoCache(100, 400, 10);
  RetentionHistory still_filling;
  followEachStep(still_filling, storageGroup(4), {alive.begin(), alive.begin() + 96});
  EXPECT_FALSE(still_filling.turnsOver(storageGroup(4)));
  RetentionHistory full;
  followEachStep(full, storageGroup(4), alive);
  EXPECT_TRUE(full.turnsOver(storageGroup(4)));
}

TEST(RetentionHistory, ACacheWhoseEntriesFallIntoTwoGroupsTurnsOverAsAWhole) {
  // A full cache of 40 entries: entries of even steps up to step 50 belong to group A, all others
  // to group B, so B's share of the cache rises from step 50 to step 90.
  RetentionHistory history;
  GroupId a = storageGroup(8);
  GroupId b = storageGroup(9);
  std::vector<std::vector<std::uint32_t>> alive = fifoCache(40, 90);
  std::vector<std::vector<std::uint32_t>> in_a(alive.size()), in_b(alive.size());
  for (std::size_t i = 0; i < alive.size(); ++i) {
    for (std::uint32_t s : alive[i]) (s % 2 == 0 && s <= 50 ? in_a[i] : in_b[i]).push_back(s);
    std::vector<GroupAtBoundary> groups;
    if (!in_a[i].empty()) groups.push_back(at(a, in_a[i], true));
    groups.push_back(at(b, in_b[i], true));
    history.update(groups, static_cast<std::uint32_t>(6 + i));
  }
  EXPECT_TRUE(history.turnsOver(b)) << "its share rises, the cache's total does not";
}

TEST(RetentionHistory, ACacheJudgedEveryFourStepsTurnsOverAfterItsSeriesIsLongEnough) {
  // The detector renews its verdict every few steps once it sees no leak.
  RetentionHistory history;
  followEachStep(history, storageGroup(10), fifoCache(20, 160), 4);
  EXPECT_TRUE(history.turnsOver(storageGroup(10)));
}

TEST(RetentionHistory, ACacheSeenAtTooFewUpdatesIsNotJudgedYet) {
  // Updates every 8 steps: 32 steps after the first eviction are only 4 samples.
  RetentionHistory history;
  followEachStep(history, storageGroup(14), fifoCache(20, 65), 8);
  EXPECT_FALSE(history.turnsOver(storageGroup(14)));
}

TEST(RetentionHistory, ALongRunThinsItsSeriesAndStillJudgesTheNewestSteps) {
  // 1,000 updates of a full cache (the series is thinned several times), then a container that
  // evicts some entries starts gaining: only the newest samples show it.
  RetentionHistory history;
  GroupId id = storageGroup(11);
  std::vector<std::vector<std::uint32_t>> alive = fifoCache(20, 1000);
  followEachStep(history, id, alive);
  EXPECT_TRUE(history.turnsOver(id));
  std::vector<std::uint32_t> held = alive.back();
  for (std::uint32_t step = 1001; step <= 1400; ++step) {
    held.push_back(step);  // kept for good from here on
    history.update({at(id, held, true)}, step + 1);
  }
  EXPECT_FALSE(history.turnsOver(id));
}

TEST(RetentionHistory, AnotherCacheClearedDoesNotExcuseAContainerThatKeepsGaining) {
  // A list that drops every third entry a step later, beside a cache of 30 entries cleared every
  // 50 steps: the evicting groups' sum falls at each clear, which must not excuse the list.
  RetentionHistory history;
  GroupId list = storageGroup(12);
  GroupId cache = storageGroup(13);
  std::vector<std::uint32_t> in_list;
  std::vector<std::uint32_t> in_cache;
  for (std::uint32_t step = 5; step <= 300; ++step) {
    if (!in_list.empty() && in_list.back() % 3 == 0) in_list.pop_back();
    in_list.push_back(step);
    if (step % 50 == 0) in_cache.clear();
    in_cache.push_back(step);
    if (in_cache.size() > 30) in_cache.erase(in_cache.begin());
    std::vector<GroupAtBoundary> groups = {at(list, in_list, true), at(cache, in_cache, true)};
    history.update(groups, step + 1);
  }
  EXPECT_FALSE(history.turnsOver(list));
}

TEST(RetentionHistory, AContainerThatEvictsSomeButKeepsGainingDoesNotTurnOver) {
  // Every third step's entry is dropped a step later; the others stay for good.
  std::vector<std::vector<std::uint32_t>> alive;
  for (std::uint32_t step = 5; step <= 200; ++step) {
    std::vector<std::uint32_t> steps;
    for (std::uint32_t s = 5; s <= step; ++s) {
      if (s % 3 != 0 || s == step) steps.push_back(s);
    }
    alive.push_back(steps);
  }
  RetentionHistory history;
  followEachStep(history, storageGroup(5), alive);
  EXPECT_FALSE(history.turnsOver(storageGroup(5)));
  EXPECT_EQ(history.turnoverPeakBytes(), 0);
}

TEST(RetentionHistory, AContainerThatNeverEvictsDoesNotTurnOver) {
  std::vector<std::vector<std::uint32_t>> alive;
  for (std::uint32_t step = 5; step <= 200; ++step) alive.push_back(range(5, step));
  RetentionHistory history;
  followEachStep(history, storageGroup(6), alive);
  EXPECT_FALSE(history.turnsOver(storageGroup(6)));
}

}  // namespace
}  // namespace memseal::detect
