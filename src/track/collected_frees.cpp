#include "track/collected_frees.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <vector>

#include "track/session.h"
#include "track/thread_state.h"

namespace memseal::track {

namespace {

// The allocations of one site and step that one collection freed.
struct CollectedEntry {
  std::uint32_t session = 0;
  std::uint32_t freed_at_step = 0;
  std::uint32_t allocated_at_step = 0;
  std::uint32_t site = 0;
  std::int64_t bytes = 0;
  std::uint64_t allocations = 0;
};

struct CollectedLog {
  std::mutex mutex;
  std::vector<CollectedEntry> entries;
};

// Never destroyed: tensors freed during static destruction may still reach it.
CollectedLog& collectedLog() {
  static CollectedLog* log = new CollectedLog();
  return *log;
}

// A collection frees the tensors of one cycle after another: the entry of the same site and step
// is among the last few more often than not.
constexpr std::size_t kEntriesLookedBack = 8;

}  // namespace

void setCollectionRunning(bool running) { threadState().in_collection = running; }

void noteCollectedFree(std::uint32_t site, std::uint32_t allocated_at_step, std::int64_t bytes) {
  ThreadState& state = threadState();
  TrackerWork work(state);  // the log's own growth is not the program's
  CollectedLog& log = collectedLog();
  std::uint32_t session = sessionId();
  std::uint32_t step = currentStep();
  std::lock_guard<std::mutex> lock(log.mutex);
  std::size_t looked = 0;
  for (auto it = log.entries.rbegin(); it != log.entries.rend() && looked < kEntriesLookedBack;
       ++it, ++looked) {
    if (it->session == session && it->freed_at_step == step && it->site == site &&
        it->allocated_at_step == allocated_at_step) {
      it->bytes += bytes;
      ++it->allocations;
      return;
    }
  }
  if (log.entries.size() >= kMaxCollectedEntries) {
    log.entries.erase(log.entries.begin(), log.entries.begin() + kMaxCollectedEntries / 2);
  }
  log.entries.push_back(CollectedEntry{session, step, allocated_at_step, site, bytes, 1});
}

CollectedFrees collectedFrees(const CollectedFreesQuery& query) {
  TrackerWork work;
  CollectedLog& log = collectedLog();
  std::uint32_t session = sessionId();
  CollectedFrees found;
  std::set<std::uint32_t> steps;
  std::lock_guard<std::mutex> lock(log.mutex);
  for (const CollectedEntry& entry : log.entries) {
    if (entry.session != session || (query.site && entry.site != *query.site)) continue;
    if (entry.allocated_at_step < query.first_allocated ||
        entry.allocated_at_step > query.last_allocated || entry.freed_at_step < query.first_freed ||
        entry.freed_at_step > query.last_freed) {
      continue;
    }
    found.bytes += entry.bytes;
    found.allocations += entry.allocations;
    steps.insert(entry.allocated_at_step);
  }
  found.allocation_steps = static_cast<std::uint32_t>(steps.size());
  return found;
}

}  // namespace memseal::track
