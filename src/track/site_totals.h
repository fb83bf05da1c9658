// Each allocation site's totals for the session (bytes and allocations ever made there), kept per
// thread so that threads allocating at the same site write no shared cache line on the hot path.
// A thread adds to a small cache of its own, direct-mapped by site id, and hands an entry's amounts
// to the site's shared totals (SiteEntry) only when another site takes the entry. A reader sums
// the shared totals and every thread's entry for the site: exact once the threads allocating there
// are quiet, at most a few allocations behind while they run, never counting one twice. A cache
// holds 1024 sites in 24 KiB, made on the thread's first tracked allocation and kept for the
// process. Its entries go by site id, and ids are given in order: a loop's sites, made in its
// first steps, take neighbouring entries. With 256, a small training loop with stacks on (a site
// per stack) had sites taking each other's entries on every step.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/branch_hints.h"
#include "track/memory_counters.h"
#include "track/thread_state.h"

namespace memseal::track {

struct SiteTotalsCache {
  static constexpr std::uint32_t kEntries = 1024;
  static constexpr std::uint32_t kNoSite = UINT32_MAX;
  // Written by the owning thread alone (a load and a store, no read-modify-write); `site` is
  // also the sequence word that tells a reader an entry changed hands while it read it.
  struct Entry {
    std::atomic<std::uint32_t> site{kNoSite};
    std::atomic<std::int64_t> bytes{0};
    std::atomic<std::int64_t> allocations{0};
  };
  Entry entries[kEntries];
};

struct SiteAmounts {
  std::int64_t bytes = 0;
  std::int64_t allocations = 0;
};

// Out of line: a thread's first tracked allocation (makes its cache), threads beyond
// MemoryCounters::kThreadSlots (straight to the shared totals) and an entry taken by another site.
void addToSiteTotalsSlowly(ThreadState& state, std::uint32_t site, std::int64_t bytes);

// On every tracked allocation.
inline void addToSiteTotals(ThreadState& state, std::uint32_t site, std::int64_t bytes) {
  if (SiteTotalsCache* cache = state.site_totals) {
    SiteTotalsCache::Entry& entry = cache->entries[site % SiteTotalsCache::kEntries];
    if (MEMSEAL_LIKELY(entry.site.load(std::memory_order_relaxed) == site)) {
      addOwned(entry.bytes, bytes);
      addOwned(entry.allocations, 1);
      return;
    }
  }
  addToSiteTotalsSlowly(state, site, bytes);
}

// The site's totals in this session, summed over the shared totals and every thread's cache.
SiteAmounts siteTotals(std::uint32_t site);

// At session start, with the shared totals (SiteTable::resetForSession): what threads still hold
// of an earlier session goes.
void resetSiteTotalsForSession();

}  // namespace memseal::track
