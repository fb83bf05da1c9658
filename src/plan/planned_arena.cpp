// The planned arena's record and replay. The invariant every path defends: memory served from a
// block never overlaps memory still in use. A replayed allocation is served only when every
// earlier planned allocation that shares its bytes has actually been freed; otherwise it falls
// back to the system allocator. A block whose planned tensors are still alive at the end of a run
// is retired (never reused) until the last of them is freed.
#include "memseal/arena.h"

#include <c10/core/ScalarType.h>

#include <charconv>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>

#include "common/text.h"
#include "plan/arena_plan.h"
#include "plan/block.h"
#include "plan/recording.h"
#include "plan/replay.h"
#include "track/arena_region.h"

namespace memseal {

namespace {

constexpr std::size_t kMaxMismatchMessages = 64;

// Sets and clears this thread's region, also when the region throws (nesting is refused earlier,
// by InRunGuard). The allocator hook itself is held by the arena for its whole life: installing it
// per run would cost two SetCPUAllocator calls.
class ThreadArenaRegionGuard {
 public:
  explicit ThreadArenaRegionGuard(track::ArenaRegion* region) {
    track::setThreadArenaRegion(region);
  }
  ~ThreadArenaRegionGuard() { track::setThreadArenaRegion(nullptr); }
  ThreadArenaRegionGuard(const ThreadArenaRegionGuard&) = delete;
  ThreadArenaRegionGuard& operator=(const ThreadArenaRegionGuard&) = delete;
};

// Set for the whole of a run on this thread, whichever way it goes (recording, replay, or on the
// normal allocator when no plan fits): regions nest in none of them.
thread_local bool t_in_run = false;

class InRunGuard {
 public:
  InRunGuard() {
    if (t_in_run) throw std::logic_error("memseal: PlannedArena::run regions do not nest");
    t_in_run = true;
  }
  ~InRunGuard() { t_in_run = false; }
  InRunGuard(const InRunGuard&) = delete;
  InRunGuard& operator=(const InRunGuard&) = delete;
};

void throwIfNoRegion(const c10::function_ref<void()>& region) {
  if (!region) throw std::invalid_argument("memseal: PlannedArena::run needs a region to run");
}

// Appends keyFor's text without a stream: "Float[8,3,64,64]", "s" after a non-contiguous input,
// "|" between inputs.
void appendKey(std::string& key, at::TensorList inputs) {
  char digits[24];
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0) key += '|';
    const at::Tensor& input = inputs[i];
    if (!input.defined()) {
      key += "undefined";
      continue;
    }
    key += c10::toString(input.scalar_type());
    key += '[';
    c10::IntArrayRef sizes = input.sizes();
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (d > 0) key += ',';
      key.append(digits, std::to_chars(digits, digits + sizeof(digits), sizes[d]).ptr);
    }
    key += ']';
    if (!input.is_contiguous()) key += 's';
  }
}

}  // namespace

struct PlannedArena::Impl {
  struct Entry {
    std::shared_ptr<const plan::ArenaPlan> plan;  // null: the key cannot be planned (over budget)
    std::vector<plan::Block*> free_blocks;
    std::int64_t blocks_in_use = 0;
    std::uint64_t last_used = 0;
    bool warned = false;
  };
  // What a run gets when it starts: record, replay on `block`, or run on the normal allocator.
  struct Checkout {
    bool record = false;
    Entry* entry = nullptr;  // stays valid while the run holds a block: makeRoom evicts no entry
                             // with blocks in use
    plan::Block* block = nullptr;
  };

  ArenaOptions options;
  mutable std::mutex mutex;
  std::map<std::string, Entry> entries;
  std::uint64_t tick = 0;
  ArenaStats stats;  // reserved_bytes: blocks the arena holds (what max_bytes limits)
  // Bytes of retired blocks whose planned tensors are still alive (see Block::retired_bytes).
  std::shared_ptr<std::atomic<std::int64_t>> retired_bytes =
      std::make_shared<std::atomic<std::int64_t>>(0);
  std::deque<std::string> messages;

  void note(const std::string& message) {
    messages.push_back(message);
    if (messages.size() > kMaxMismatchMessages) messages.pop_front();
  }

  // The arena lets go of a block; it is deleted once no tensor served from it is alive.
  void retire(plan::Block* block) {
    stats.reserved_bytes -= block->memory_size;
    // Only a tensor can be freed meanwhile (no run uses a block being retired), and the arena's own
    // reference keeps the block alive until release(): the count is set before it can drop.
    if (block->liveTensors() > 0) {
      block->retired_bytes = retired_bytes;
      retired_bytes->fetch_add(static_cast<std::int64_t>(block->memory_size));
    }
    block->release();
  }

  // Frees unused blocks of the least recently used entries until `needed` more bytes fit.
  bool makeRoom(std::size_t needed, const std::string& keep_key) {
    while (stats.reserved_bytes + needed > options.max_bytes) {
      auto victim = entries.end();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->first == keep_key || it->second.blocks_in_use > 0 || !it->second.plan) continue;
        if (victim == entries.end() || it->second.last_used < victim->second.last_used) victim = it;
      }
      if (victim == entries.end()) return false;
      for (plan::Block* block : victim->second.free_blocks) retire(block);
      entries.erase(victim);
      ++stats.evicted_plans;
    }
    return true;
  }

  Checkout checkOut(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    Checkout checkout;
    auto found = entries.find(key);
    if (found == entries.end()) {
      checkout.record = true;
      return checkout;
    }
    Entry& entry = found->second;
    checkout.entry = &entry;
    entry.last_used = ++tick;
    if (const std::shared_ptr<const plan::ArenaPlan>& plan = entry.plan) {
      // Room for the block to come back without allocating: returning it cannot fail then.
      entry.free_blocks.reserve(entry.free_blocks.size() +
                                static_cast<std::size_t>(entry.blocks_in_use) + 1);
      if (!entry.free_blocks.empty()) {
        checkout.block = entry.free_blocks.back();
        entry.free_blocks.pop_back();
      } else if (makeRoom(plan::Block::memorySize(plan->summary.block_bytes, options.huge_pages),
                          key)) {
        checkout.block = new plan::Block(plan, plan->summary.block_bytes, options.huge_pages);
        stats.reserved_bytes += checkout.block->memory_size;
      }
      if (checkout.block != nullptr) ++entry.blocks_in_use;
    }
    if (checkout.block == nullptr) ++stats.unplanned_runs;
    return checkout;
  }

  void recordRun(const std::string& key, c10::function_ref<void()> region) {
    plan::RecordingRegion recording;
    {
      ThreadArenaRegionGuard guard(&recording);
      region();
    }
    std::shared_ptr<const plan::ArenaPlan> made = plan::buildArenaPlan(key, recording.finish());
    std::lock_guard<std::mutex> lock(mutex);
    ++stats.recordings;
    Entry& recorded = entries[key];
    recorded.last_used = ++tick;
    if (plan::Block::memorySize(made->summary.block_bytes, options.huge_pages) >
        options.max_bytes) {
      note("key " + key + ": the plan needs " +
           common::bytesText(static_cast<std::int64_t>(made->summary.block_bytes)) +
           ", above the arena's max_bytes; runs under this key use the normal allocator");
    } else {
      recorded.plan = std::move(made);
      // The first block is made with the plan, so the first replay finds it ready: making it
      // (its pages faulted in) belongs to the recording, the run that already allocates.
      std::size_t block_size =
          plan::Block::memorySize(recorded.plan->summary.block_bytes, options.huge_pages);
      // Only into room the arena has: no other plan is evicted for a block nobody asked for yet.
      if (recorded.free_blocks.empty() && recorded.blocks_in_use == 0 &&
          stats.reserved_bytes + block_size <= options.max_bytes) {
        try {
          recorded.free_blocks.reserve(2);  // what the first checkOut asks room for
          recorded.free_blocks.push_back(new plan::Block(
              recorded.plan, recorded.plan->summary.block_bytes, options.huge_pages));
          stats.reserved_bytes += recorded.free_blocks.back()->memory_size;
        } catch (const std::exception&) {
          // No memory for it now: the first replay tries again, and runs unplanned if it fails.
        }
      }
    }
  }

  void replayRun(const std::string& key, const Checkout& checkout,
                 c10::function_ref<void()> region) {
    plan::ReplayRegion replay(checkout.block);
    try {
      ThreadArenaRegionGuard guard(&replay);
      region();
    } catch (...) {
      replay.endRun();
      std::lock_guard<std::mutex> lock(mutex);
      --checkout.entry->blocks_in_use;
      ++stats.retired_blocks;
      retire(checkout.block);  // its tensors may be anywhere in the unwinding code
      throw;
    }
    replay.endRun();
    settle(key, checkout, replay);
  }

  // After a replay: the block back to the entry (or retired), then counts and messages.
  void settle(const std::string& key, const Checkout& checkout, plan::ReplayRegion& replay) {
    plan::Block* block = checkout.block;
    Entry& entry = *checkout.entry;
    // Read before the block may go: a retired block dies with its last tensor, on any thread.
    const std::size_t allocations_recorded = block->plan->sizes.size();
    const bool made_fewer = replay.allocationsMade() < allocations_recorded;
    std::lock_guard<std::mutex> lock(mutex);
    // The block and the counts first: what follows composes messages, which may throw.
    --entry.blocks_in_use;
    std::int64_t still_alive = block->liveTensors();
    if (still_alive > 0) {
      // A tensor planned to die inside the region is still alive: this block must not be reused.
      ++stats.retired_blocks;
      retire(block);
    } else {
      entry.free_blocks.push_back(block);  // within the capacity reserved when it was taken
    }
    ++stats.replays;
    stats.served_allocations += replay.served();
    stats.fallback_allocations += replay.fallbacks() + (made_fewer ? 1 : 0);
    stats.output_allocations += replay.outputs();
    if (made_fewer) {
      replay.mismatch("the run made " + std::to_string(replay.allocationsMade()) +
                      " allocations; the recording made " + std::to_string(allocations_recorded));
    }
    if (!replay.firstMismatch().empty()) {
      ++stats.mismatched_runs;
      std::string message = "key " + key + ": " + replay.firstMismatch() + " (" +
                            std::to_string(replay.fallbacks()) +
                            " allocation(s) fell back to the normal allocator)";
      note(message);
      if (options.warn_on_mismatch && !entry.warned) {
        entry.warned = true;
        std::cerr << "memseal arena: " << message << "\n";
      }
    }
    if (still_alive > 0) {
      note("key " + key + ": " + std::to_string(still_alive) +
           " tensor(s) planned to be freed inside the region are still alive at its end; "
           "their block is retired until they are freed");
    }
  }
};

PlannedArena::PlannedArena(ArenaOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->options = options;
  track::acquireAllocatorHook();
}

PlannedArena::~PlannedArena() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (auto& [key, entry] : impl_->entries) {
      for (plan::Block* block : entry.free_blocks) impl_->retire(block);
      entry.free_blocks.clear();
    }
  }
  track::releaseAllocatorHook();
}

std::string PlannedArena::keyFor(at::TensorList inputs) {
  std::string key;
  appendKey(key, inputs);
  return key;
}

void PlannedArena::run(at::TensorList inputs, c10::function_ref<void()> region) {
  throwIfNoRegion(region);
  InRunGuard in_run;  // before the buffer changes: an outer run would be using it as its key
  thread_local std::string key;
  key.clear();
  appendKey(key, inputs);
  runUnderKey(key, region);
}

void PlannedArena::run(const std::string& key, c10::function_ref<void()> region) {
  throwIfNoRegion(region);
  InRunGuard in_run;
  runUnderKey(key, region);
}

void PlannedArena::runUnderKey(const std::string& key, c10::function_ref<void()> region) {
  Impl::Checkout checkout = impl_->checkOut(key);
  if (checkout.record) {
    impl_->recordRun(key, region);
  } else if (checkout.block == nullptr) {
    region();  // no plan possible: the normal allocator serves this run
  } else {
    impl_->replayRun(key, checkout, region);
  }
}

std::optional<ArenaPlanSummary> PlannedArena::plan(const std::string& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto found = impl_->entries.find(key);
  if (found == impl_->entries.end() || !found->second.plan) return std::nullopt;
  return found->second.plan->summary;
}

ArenaStats PlannedArena::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  ArenaStats stats = impl_->stats;
  stats.reserved_bytes += static_cast<std::size_t>(impl_->retired_bytes->load());
  return stats;
}

std::vector<std::string> PlannedArena::mismatches() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return {impl_->messages.begin(), impl_->messages.end()};
}

}  // namespace memseal
