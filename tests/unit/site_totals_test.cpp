// A thread's site totals cache: sites that share a home entry keep an entry each (nothing handed
// over to the shared totals while they take turns), and a window crowded beyond its entries still
// adds up exactly; a thread that ends hands its amounts over and leaves its cache to the next. The
// sites are real ones of the site table, picked by their ids to share homes.
#include "track/site_totals.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "track/site_table.h"

namespace memseal::track {
namespace {

constexpr std::uint32_t kEntries = SiteTotalsCache::kEntries;

// Sites of the site table, interned once for the whole test binary, grouped by their home entry.
const std::map<std::uint32_t, std::vector<std::uint32_t>>& sitesByHome() {
  static const auto* by_home = [] {
    auto* groups = new std::map<std::uint32_t, std::vector<std::uint32_t>>();
    ThreadState state{};
    for (int i = 0; i < 6000; ++i) {
      std::string name = "site-totals-test-" + std::to_string(i);
      std::uint32_t site = siteTable().currentOpSite(state, siteTable().internString(name.c_str()));
      (*groups)[SiteTotalsCache::home(site)].push_back(site);
    }
    return groups;
  }();
  return *by_home;
}

// `count` sites with one home; the home's neighbour's sites in `neighbours` when asked.
std::vector<std::uint32_t> sitesSharingAHome(std::size_t count,
                                             std::vector<std::uint32_t>* neighbours = nullptr) {
  for (const auto& [home, sites] : sitesByHome()) {
    if (sites.size() < count) continue;
    if (neighbours != nullptr) {
      auto next = sitesByHome().find((home + 1) % kEntries);
      if (next == sitesByHome().end()) continue;
      *neighbours = next->second;
    }
    return std::vector<std::uint32_t>(sites.begin(), sites.begin() + static_cast<long>(count));
  }
  ADD_FAILURE() << "no " << count << " sites share a home";
  return {};
}

std::int64_t handedOverAllocations(std::uint32_t site) {
  return siteTable().site(site).allocations_total.load();
}

class SiteTotalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    siteTable().resetForSession();
    resetSiteTotalsForSession();
  }
  void TearDown() override {
    siteTable().resetForSession();
    resetSiteTotalsForSession();
  }
};

TEST_F(SiteTotalsTest, SitesSharingAHomeTakeTurnsWithoutHandingOver) {
  ThreadState state{};
  // Three sites with the same home, allocating in turn as a loop's step does.
  const std::vector<std::uint32_t> sites = sitesSharingAHome(3);
  ASSERT_EQ(sites.size(), 3u);
  constexpr int kRounds = 50;
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t i = 0; i < sites.size(); ++i) {
      addToSiteTotals(state, sites[i], static_cast<std::int64_t>(16 * (i + 1)));
    }
  }
  for (std::size_t i = 0; i < sites.size(); ++i) {
    SiteAmounts amounts = siteTotals(sites[i]);
    EXPECT_EQ(amounts.allocations, kRounds) << sites[i];
    EXPECT_EQ(amounts.bytes, kRounds * 16 * static_cast<std::int64_t>(i + 1)) << sites[i];
    EXPECT_EQ(handedOverAllocations(sites[i]), 0) << "site " << sites[i] << " lost its entry";
  }
}

TEST_F(SiteTotalsTest, AWindowCrowdedBeyondItsEntriesStillAddsUpExactly) {
  ThreadState state{};
  // More sites on one home than its window has entries, and a neighbour whose window overlaps it.
  std::vector<std::uint32_t> sites;
  for (std::uint32_t i = 0; i < SiteTotalsCache::kWindow + 2; ++i)
    sites.push_back(9 + i * kEntries);
  sites.push_back(10);
  constexpr int kRounds = 40;
  for (int round = 0; round < kRounds; ++round) {
    for (std::uint32_t site : sites) addToSiteTotals(state, site, 8);
  }
  std::int64_t handed_over = 0;
  for (std::uint32_t site : sites) {
    SiteAmounts amounts = siteTotals(site);
    EXPECT_EQ(amounts.allocations, kRounds) << site;
    EXPECT_EQ(amounts.bytes, kRounds * 8) << site;
    handed_over += handedOverAllocations(site);
  }
  EXPECT_GT(handed_over, 0) << "more sites than entries, yet none was handed over";
}

TEST_F(SiteTotalsTest, ASessionStartForgetsWhatTheCacheHeld) {
  ThreadState state{};
  const std::vector<std::uint32_t> sites = sitesSharingAHome(2);
  ASSERT_EQ(sites.size(), 2u);
  addToSiteTotals(state, sites[0], 64);
  addToSiteTotals(state, sites[1], 64);
  ASSERT_EQ(siteTotals(sites[1]).allocations, 1);
  siteTable().resetForSession();
  resetSiteTotalsForSession();
  EXPECT_EQ(siteTotals(sites[0]).allocations, 0);
  EXPECT_EQ(siteTotals(sites[1]).allocations, 0);
  addToSiteTotals(state, sites[1], 32);
  EXPECT_EQ(siteTotals(sites[1]).bytes, 32);
}

// Threads that come and go one after another, as a server's thread per request: each ending thread
// hands its amounts over and leaves its cache to the next, so the caches do not grow with the
// number of threads that ever ran, and nothing they counted is lost.
TEST_F(SiteTotalsTest, AThreadThatEndsLeavesItsCacheToTheNext) {
  const std::vector<std::uint32_t> sites = sitesSharingAHome(1);
  ASSERT_EQ(sites.size(), 1u);
  std::uint32_t made_before = siteTotalsCachesMade();
  constexpr int kThreads = 20;
  constexpr int kAllocations = 5;
  for (int thread = 0; thread < kThreads; ++thread) {
    std::thread([&] {
      ThreadState& state = threadState();
      for (int i = 0; i < kAllocations; ++i) addToSiteTotals(state, sites[0], 16);
      EXPECT_NE(state.site_totals, nullptr);
    }).join();
  }
  EXPECT_LE(siteTotalsCachesMade(), made_before + 1);
  SiteAmounts amounts = siteTotals(sites[0]);
  EXPECT_EQ(amounts.allocations, kThreads * kAllocations);
  EXPECT_EQ(amounts.bytes, kThreads * kAllocations * 16);
  // All of it handed over: no cache holds any of it now.
  EXPECT_EQ(handedOverAllocations(sites[0]), kThreads * kAllocations);
}

}  // namespace
}  // namespace memseal::track
