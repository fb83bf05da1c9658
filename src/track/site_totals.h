// Each allocation site's totals for the session (bytes and allocations ever made there), kept per
// thread so that threads allocating at the same site write no shared cache line on the hot path.
// A thread adds to a small cache of its own and hands an entry's amounts to the site's shared
// totals (SiteEntry) only when another site takes the entry. A reader sums the shared totals and
// every thread's entry for the site: exact once the threads allocating there are quiet, at most a
// few allocations behind while they run, never counting one twice. A cache holds 1024 sites in
// 24 KiB; a thread takes one on its first tracked allocation and gives it back when it ends (its
// amounts handed over), for the next thread: caches are as many as threads that ran at once.
//
// A site's entry is one of the kWindow entries from its home (site id modulo the entries) on. Site
// ids are slots of the site table's hash table, so a loop's sites land on homes at random: with 50
// sites, two share a home in seven runs out of ten. Direct-mapped, those two took each other's
// entry on every step, a hand-over to the shared totals each time; in a window they keep an entry
// each, and sites take each other's entries only where more of them crowd a window than it holds.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/branch_hints.h"
#include "track/memory_counters.h"
#include "track/thread_state.h"

namespace memseal::track {

struct SiteTotalsCache {
  static constexpr std::uint32_t kEntries = 1024;
  static constexpr std::uint32_t kWindow = 4;
  static constexpr std::uint32_t kNoSite = UINT32_MAX;
  // Written by the owning thread alone (a load and a store, no read-modify-write); `site` is
  // also the sequence word that tells a reader an entry changed hands while it read it.
  struct Entry {
    std::atomic<std::uint32_t> site{kNoSite};
    std::atomic<std::int64_t> bytes{0};
    std::atomic<std::int64_t> allocations{0};
    // One more allocation of the entry's site (by the owning thread).
    void add(std::int64_t amount) {
      addOwned(bytes, amount);
      addOwned(allocations, 1);
    }
  };
  Entry entries[kEntries];
  // Which entry of a full window the next site takes, in turn (the owning thread's alone).
  std::uint32_t next_taken = 0;
  // The next cache given back by an ended thread (site_totals.cpp, under its lock).
  SiteTotalsCache* next_free = nullptr;

  static std::uint32_t home(std::uint32_t site) { return site % kEntries; }
  // The `offset`-th entry of the window that starts at `home`, wrapping at the end.
  Entry& at(std::uint32_t home, std::uint32_t offset) {
    return entries[(home + offset) % kEntries];
  }
  const Entry& at(std::uint32_t home, std::uint32_t offset) const {
    return entries[(home + offset) % kEntries];
  }
};

struct SiteAmounts {
  std::int64_t bytes = 0;
  std::int64_t allocations = 0;
};

// Out of line: a thread's first tracked allocation (takes its cache), threads beyond as many
// caches as MemoryCounters::kThreadSlots at once and threads ending (straight to the shared
// totals), a site whose entry is not its home and a site without an entry.
void addToSiteTotalsSlowly(ThreadState& state, std::uint32_t site, std::int64_t bytes);

// On every tracked allocation.
inline void addToSiteTotals(ThreadState& state, std::uint32_t site, std::int64_t bytes) {
  if (SiteTotalsCache* cache = state.site_totals) {
    SiteTotalsCache::Entry& entry = cache->entries[SiteTotalsCache::home(site)];
    if (MEMSEAL_LIKELY(entry.site.load(std::memory_order_relaxed) == site)) {
      entry.add(bytes);
      return;
    }
  }
  addToSiteTotalsSlowly(state, site, bytes);
}

// How many caches were made: at most as many as threads that held one at once.
std::uint32_t siteTotalsCachesMade();

// The site's totals in this session, summed over the shared totals and every thread's cache.
SiteAmounts siteTotals(std::uint32_t site);

// At session start, with the shared totals (SiteTable::resetForSession): what threads still hold
// of an earlier session goes.
void resetSiteTotalsForSession();

}  // namespace memseal::track
