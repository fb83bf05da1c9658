// Per-thread site totals (site_totals.h). The caches are made once per thread slot and never
// freed: a thread that ended keeps its amounts readable, and slots are never reused.
#include "track/site_totals.h"

#include "track/site_table.h"

namespace memseal::track {

namespace {

struct SiteTotalsCaches {
  std::atomic<SiteTotalsCache*> by_slot[MemoryCounters::kThreadSlots] = {};
  std::atomic<std::uint32_t> highest_slot{0};  // caches exist only in slots below it
};

SiteTotalsCaches& caches() {
  static auto* all = new SiteTotalsCaches();  // never destroyed, see session.h
  return *all;
}

void addToShared(std::uint32_t site, std::int64_t bytes, std::int64_t allocations) {
  SiteEntry& shared = siteTable().site(site);
  // Release: a reader that sees these amounts in the shared totals then sees the entry they left.
  shared.allocated_bytes_total.fetch_add(bytes, std::memory_order_release);
  shared.allocations_total.fetch_add(allocations, std::memory_order_release);
}

}  // namespace

void addToSiteTotalsSlowly(ThreadState& state, std::uint32_t site, std::int64_t bytes) {
  SiteTotalsCache* cache = state.site_totals;
  if (cache == nullptr) {
    std::uint32_t slot = cpuCounters().threadSlot(state);
    if (slot > MemoryCounters::kThreadSlots) {  // beyond the slots: the shared totals alone
      addToShared(site, bytes, 1);
      return;
    }
    cache = new SiteTotalsCache();  // the caller's TrackerWork keeps this from being tracked
    SiteTotalsCaches& all = caches();
    all.by_slot[slot - 1].store(cache, std::memory_order_release);
    std::uint32_t highest = all.highest_slot.load(std::memory_order_relaxed);
    while (highest < slot &&
           !all.highest_slot.compare_exchange_weak(highest, slot, std::memory_order_release)) {
    }
    state.site_totals = cache;
  }
  // The site's entry in its window, if it has one; else it takes the window's first empty entry,
  // or else one in turn.
  std::uint32_t home = SiteTotalsCache::home(site);
  SiteTotalsCache::Entry* taken = nullptr;
  for (std::uint32_t offset = 0; offset < SiteTotalsCache::kWindow; ++offset) {
    SiteTotalsCache::Entry& entry = cache->at(home, offset);
    std::uint32_t held = entry.site.load(std::memory_order_relaxed);
    if (held == site) {
      entry.add(bytes);
      return;
    }
    if (held == SiteTotalsCache::kNoSite && taken == nullptr) taken = &entry;
  }
  if (taken == nullptr) {
    taken = &cache->at(home, cache->next_taken++ % SiteTotalsCache::kWindow);
  }
  std::uint32_t held = taken->site.load(std::memory_order_relaxed);
  // The entry changes hands, as a seqlock's writer: marked empty before its amounts change (the
  // new amounts are released, so a reader that acquires one of them then sees the mark), given its
  // new site after; a reader that read it meanwhile sees the mark and leaves it out.
  taken->site.store(SiteTotalsCache::kNoSite, std::memory_order_relaxed);
  if (held != SiteTotalsCache::kNoSite) {
    addToShared(held, taken->bytes.load(std::memory_order_relaxed),
                taken->allocations.load(std::memory_order_relaxed));
  }
  taken->bytes.store(bytes, std::memory_order_release);
  taken->allocations.store(1, std::memory_order_release);
  taken->site.store(site, std::memory_order_release);
}

SiteAmounts siteTotals(std::uint32_t site) {
  SiteAmounts amounts;
  const SiteEntry& shared = siteTable().site(site);
  // The shared totals first: amounts an entry handed over after this read are still in the entry
  // or missed (behind), never counted twice.
  amounts.bytes = shared.allocated_bytes_total.load(std::memory_order_acquire);
  amounts.allocations = shared.allocations_total.load(std::memory_order_acquire);
  SiteTotalsCaches& all = caches();
  std::uint32_t slots = all.highest_slot.load(std::memory_order_acquire);
  for (std::uint32_t slot = 0; slot < slots; ++slot) {
    SiteTotalsCache* cache = all.by_slot[slot].load(std::memory_order_acquire);
    if (cache == nullptr) continue;
    // The site holds one entry of its window at most. An entry that changes hands while it is
    // read is left out; amounts an entry read here hands over later went to the shared totals,
    // read before; and an entry the site takes again after one read here holds only what came
    // since: behind at most, never twice.
    std::uint32_t home = SiteTotalsCache::home(site);
    for (std::uint32_t offset = 0; offset < SiteTotalsCache::kWindow; ++offset) {
      const SiteTotalsCache::Entry& entry = cache->at(home, offset);
      if (entry.site.load(std::memory_order_acquire) != site) continue;
      std::int64_t bytes = entry.bytes.load(std::memory_order_acquire);
      std::int64_t allocations = entry.allocations.load(std::memory_order_acquire);
      if (entry.site.load(std::memory_order_relaxed) != site) continue;  // changed hands meanwhile
      amounts.bytes += bytes;
      amounts.allocations += allocations;
    }
  }
  return amounts;
}

void resetSiteTotalsForSession() {
  SiteTotalsCaches& all = caches();
  std::uint32_t slots = all.highest_slot.load(std::memory_order_acquire);
  for (std::uint32_t slot = 0; slot < slots; ++slot) {
    SiteTotalsCache* cache = all.by_slot[slot].load(std::memory_order_acquire);
    if (cache == nullptr) continue;
    for (SiteTotalsCache::Entry& entry : cache->entries) {
      entry.site.store(SiteTotalsCache::kNoSite, std::memory_order_relaxed);
      entry.bytes.store(0, std::memory_order_relaxed);
      entry.allocations.store(0, std::memory_order_relaxed);
    }
  }
}

}  // namespace memseal::track
