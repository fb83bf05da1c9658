// Tracker::snapshot: the live allocations of the session grouped by site, newest first within a
// site. Site live counts come from the records themselves, so the hot path keeps none per site.
#include <algorithm>
#include <map>

#include "analyze/live_view.h"
#include "memseal/tracker.h"
#include "track/site_table.h"
#include "track/site_totals.h"

namespace memseal {

Snapshot Tracker::snapshot(std::size_t max_examples_per_site) const {
  Snapshot snapshot;
  snapshot.cpu = stats();
  std::vector<analyze::LiveItem> items = analyze::collectLive();
  std::sort(items.begin(), items.end(), [](const analyze::LiveItem& a, const analyze::LiveItem& b) {
    return analyze::newerThan(a.record, b.record);
  });
  std::map<std::uint32_t, SiteSnapshot> by_site;
  for (const analyze::LiveItem& item : items) {
    SiteSnapshot& site = by_site[item.record.site];
    site.live_bytes += static_cast<std::int64_t>(item.record.bytes);
    site.live_count += 1;
    if (site.allocations.size() < max_examples_per_site) {
      site.allocations.push_back(analyze::describeAllocation(item));
    }
  }
  for (auto& [site_id, site] : by_site) {
    site.site = analyze::describeSite(site_id);
    track::SiteAmounts totals = track::siteTotals(site_id);
    site.allocated_bytes_total = totals.bytes;
    site.allocations_total = totals.allocations;
    snapshot.sites.push_back(std::move(site));
  }
  std::sort(
      snapshot.sites.begin(), snapshot.sites.end(),
      [](const SiteSnapshot& a, const SiteSnapshot& b) { return a.live_bytes > b.live_bytes; });
  return snapshot;
}

}  // namespace memseal
