// Per-thread site totals (site_totals.h). A cache is made for a thread that has none and no ended
// thread left one behind; a thread that ends hands its amounts over to the shared totals and leaves
// its cache to the next thread. So there are as many caches as threads ever ran at once (at most
// kMaxCaches), not as many as ever ran: a server that starts a thread per request does not grow by
// a cache per request.
#include "track/site_totals.h"

#include <mutex>

#include "track/site_table.h"

namespace memseal::track {

namespace {

struct SiteTotalsCaches {
  // Every cache made, in the order made; never freed, so a reader may read one while its thread
  // ends or another takes it over (entries that change hands meanwhile are left out).
  static constexpr std::uint32_t kMaxCaches = MemoryCounters::kThreadSlots;
  std::atomic<SiteTotalsCache*> made[kMaxCaches] = {};
  std::atomic<std::uint32_t> made_count{0};
  // Caches whose threads ended, linked through SiteTotalsCache::next_free. Taken and given back
  // once per thread: a lock is cheap there.
  std::mutex free_mutex;
  SiteTotalsCache* free = nullptr;
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

// The entry's amounts go to its site's shared totals and the entry is left empty. As a seqlock's
// writer: marked empty before its amounts change hands (the shared totals' release then shows a
// reader the mark), so a reader counts them in the entry or in the shared totals, never in both.
// The amounts stay as they were: no reader counts an empty entry's, and its next site writes its
// own.
void handOver(SiteTotalsCache::Entry& entry) {
  std::uint32_t held = entry.site.load(std::memory_order_relaxed);
  if (held == SiteTotalsCache::kNoSite) return;
  entry.site.store(SiteTotalsCache::kNoSite, std::memory_order_relaxed);
  addToShared(held, entry.bytes.load(std::memory_order_relaxed),
              entry.allocations.load(std::memory_order_relaxed));
}

// A cache whose thread ended, else a new one; null when kMaxCaches threads hold one each.
SiteTotalsCache* takeCache() {
  SiteTotalsCaches& all = caches();
  std::lock_guard<std::mutex> lock(all.free_mutex);
  if (SiteTotalsCache* cache = all.free) {
    all.free = cache->next_free;
    cache->next_free = nullptr;
    return cache;
  }
  std::uint32_t index = all.made_count.load(std::memory_order_relaxed);
  if (index >= SiteTotalsCaches::kMaxCaches) return nullptr;
  auto* cache = new SiteTotalsCache();  // the caller's TrackerWork keeps this from being tracked
  all.made[index].store(cache, std::memory_order_release);
  all.made_count.store(index + 1, std::memory_order_release);
  return cache;
}

// Gives the ending thread's cache back (its destructor runs as the thread ends, once the thread
// has a cache): its amounts go to the shared totals, the cache to the next thread that needs one.
struct CacheGivenBack {
  ~CacheGivenBack() {
    ThreadState& state = threadState();
    SiteTotalsCache* cache = state.site_totals;
    state.site_totals = nullptr;
    state.site_totals_given_back = true;  // what it still allocates goes to the shared totals
    if (cache == nullptr) return;
    for (SiteTotalsCache::Entry& entry : cache->entries) handOver(entry);
    SiteTotalsCaches& all = caches();
    std::lock_guard<std::mutex> lock(all.free_mutex);
    cache->next_free = all.free;
    all.free = cache;
  }
};
thread_local CacheGivenBack t_cache_given_back;

}  // namespace

void addToSiteTotalsSlowly(ThreadState& state, std::uint32_t site, std::int64_t bytes) {
  SiteTotalsCache* cache = state.site_totals;
  if (cache == nullptr) {
    // A thread that gave its cache back as it ends, or one beyond kMaxCaches threads at once: the
    // shared totals alone.
    if (!state.site_totals_given_back) cache = takeCache();
    if (cache == nullptr) {
      addToShared(site, bytes, 1);
      return;
    }
    state.site_totals = cache;
    if (&state == &threadState()) (void)&t_cache_given_back;  // given back when the thread ends
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
  // The entry changes hands: emptied (handOver), its new amounts released (a reader that acquires
  // one of them then sees the mark), given its new site after; a reader that read it meanwhile
  // sees the mark and leaves it out.
  handOver(*taken);
  taken->bytes.store(bytes, std::memory_order_release);
  taken->allocations.store(1, std::memory_order_release);
  taken->site.store(site, std::memory_order_release);
}

std::uint32_t siteTotalsCachesMade() { return caches().made_count.load(std::memory_order_acquire); }

SiteAmounts siteTotals(std::uint32_t site) {
  SiteAmounts amounts;
  const SiteEntry& shared = siteTable().site(site);
  // The shared totals first: amounts an entry handed over after this read are still in the entry
  // or missed (behind), never counted twice.
  amounts.bytes = shared.allocated_bytes_total.load(std::memory_order_acquire);
  amounts.allocations = shared.allocations_total.load(std::memory_order_acquire);
  SiteTotalsCaches& all = caches();
  std::uint32_t made = all.made_count.load(std::memory_order_acquire);
  for (std::uint32_t index = 0; index < made; ++index) {
    SiteTotalsCache* cache = all.made[index].load(std::memory_order_acquire);
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
  std::uint32_t made = all.made_count.load(std::memory_order_acquire);
  for (std::uint32_t index = 0; index < made; ++index) {
    SiteTotalsCache* cache = all.made[index].load(std::memory_order_acquire);
    if (cache == nullptr) continue;
    for (SiteTotalsCache::Entry& entry : cache->entries) {
      entry.site.store(SiteTotalsCache::kNoSite, std::memory_order_relaxed);
      entry.bytes.store(0, std::memory_order_relaxed);
      entry.allocations.store(0, std::memory_order_relaxed);
    }
  }
}

}  // namespace memseal::track
