#include "detect/held_causes.h"

#include <algorithm>
#include <map>
#include <utility>

#include "detect/findings.h"

namespace memseal::detect {

std::string causeKey(const LeakFinding& finding) {
  std::string line = causeLine(finding.site);
  return std::string(categoryId(finding.category)) + "|" +
         (line.empty() ? finding.site.op + "|" + finding.site.outer_op : line);
}

bool sameCause(const LeakFinding& finding, const HeldCause& cause) {
  if (causeKey(finding) == cause.key) return true;
  // One site is one call stack: its key differs only when one report could not read its frames.
  return finding.category == cause.finding.category && finding.site.id != 0 &&
         finding.site.id == cause.finding.site.id;
}

void mergeFindingsOfOneCause(std::vector<LeakFinding>& findings) {
  std::map<std::string, std::size_t> first_of_cause;
  std::vector<LeakFinding> merged;
  merged.reserve(findings.size());
  for (LeakFinding& finding : findings) {
    if (finding.freed || finding.category == LeakCategory::kUntrackedGrowth) {
      merged.push_back(std::move(finding));
      continue;
    }
    auto [first, is_first] = first_of_cause.emplace(causeKey(finding), merged.size());
    if (is_first) {
      merged.push_back(std::move(finding));
      continue;
    }
    LeakFinding& into = merged[first->second];
    into.survivors += finding.survivors;
    into.survivor_bytes += finding.survivor_bytes;
  }
  findings = std::move(merged);
}

void addHeldCause(std::vector<HeldCause>& into, HeldCause cause) {
  for (HeldCause& known : into) {
    if (known.key != cause.key || known.by_collector != cause.by_collector) continue;
    HeldUntilFreed& freed = *known.finding.freed;
    const HeldUntilFreed& next = *cause.finding.freed;
    bool larger = next.peak_bytes > freed.peak_bytes;
    HeldUntilFreed merged = freed;
    merged.last_step = std::max(freed.last_step, next.last_step);
    merged.freed_at_step = std::max(freed.freed_at_step, next.freed_at_step);
    merged.times += next.times;
    merged.peak_bytes = std::max(freed.peak_bytes, next.peak_bytes);
    for (const auto& [length, count] : cause.build_up_lengths)
      known.build_up_lengths[length] += count;
    merged.steps_per_time = medianLength(known.build_up_lengths);
    // The largest build-up tells what it held; the dates cover all of them.
    if (larger) known.finding = cause.finding;
    known.finding.freed = merged;
    known.detected_at = std::min(known.detected_at, cause.detected_at);
    return;
  }
  into.push_back(std::move(cause));
}

track::CollectedFreesQuery collectorQuery(const Collapse& collapse) {
  track::CollectedFreesQuery query;
  if (!collapse.id.graph) query.site = collapse.id.key.site;
  query.first_allocated = collapse.first_step;
  query.last_allocated = collapse.last_step;
  query.first_freed = collapse.last_step;
  query.last_freed = collapse.freed_by;
  return query;
}

bool freedByCollector(const Collapse& collapse, const track::CollectedFrees& collected) {
  if (collected.allocations == 0) return false;
  if (!collapse.id.graph && collapse.peak_bytes > 0) {
    return collected.bytes * 2 >= collapse.peak_bytes;
  }
  std::uint32_t steps = collapse.last_step - collapse.first_step + 1;
  return collected.allocation_steps >= std::max<std::uint32_t>(2, steps / 4);
}

}  // namespace memseal::detect
