// Memory that Python's cyclic garbage collector frees. A reference cycle that holds tensors (a
// custom autograd Function that keeps its output on ctx: output -> grad_fn -> ctx -> output) is
// freed only when the collector runs, every hundred steps or so: its tensors build up and are
// freed together, as a running total's graph reset every N steps is. The two differ in who frees
// them: the collector frees garbage, however it rises and falls; a reset, a list cleared or a
// function returning is the program's own doing. A Python front end tells the tracker when a
// collection runs (gc.callbacks); each tracked allocation freed on that thread meanwhile is
// remembered here, and the leak detector asks, for a build-up that was freed, whether the
// collector freed it.
#pragma once

#include <cstdint>
#include <optional>

namespace memseal::track {

// Told by a gc callback at the start and the end of a collection, on the collecting thread: frees
// on this thread in between are the collector's.
void setCollectionRunning(bool running);

// The free path's, for a tracked allocation of this session freed while a collection runs on the
// thread (rare: collections that free tensors come every hundred steps or more).
void noteCollectedFree(std::uint32_t site, std::uint32_t allocated_at_step, std::int64_t bytes);

struct CollectedFreesQuery {
  std::optional<std::uint32_t> site;  // allocations of this site only; all sites when empty
  std::uint32_t first_allocated = 0;  // allocated in steps [first_allocated, last_allocated]
  std::uint32_t last_allocated = 0;
  std::uint32_t first_freed = 0;  // freed in steps [first_freed, last_freed]
  std::uint32_t last_freed = 0;
};

struct CollectedFrees {
  std::int64_t bytes = 0;
  std::uint64_t allocations = 0;
  std::uint32_t allocation_steps = 0;  // distinct steps the freed allocations were made in
};

// What the collector freed of this session's allocations that `query` selects. The most recent
// kMaxCollectedEntries entries (one per collection, site and step of allocation) are kept.
CollectedFrees collectedFrees(const CollectedFreesQuery& query);
constexpr std::size_t kMaxCollectedEntries = 1 << 16;

}  // namespace memseal::track
