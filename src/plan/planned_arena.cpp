// The planned arena's record and replay. The invariant every path defends: memory served from a
// block never overlaps memory still in use. A replayed allocation is served only when every
// earlier planned allocation that shares its bytes has actually been freed; otherwise it falls
// back to the system allocator. A block whose planned tensors are still alive at the end of a run
// is retired (never reused) until the last of them is freed.
#include "memseal/arena.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>

#include "plan/offset_planner.h"
#include "report/format.h"
#include "track/engine.h"
#include "track/thread_state.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(MEMSEAL_ASAN)
#include <sanitizer/asan_interface.h>
#define MEMSEAL_POISON(address, size) ASAN_POISON_MEMORY_REGION(address, size)
#define MEMSEAL_UNPOISON(address, size) ASAN_UNPOISON_MEMORY_REGION(address, size)
#else
#define MEMSEAL_POISON(address, size) ((void)(address), (void)(size))
#define MEMSEAL_UNPOISON(address, size) ((void)(address), (void)(size))
#endif

namespace memseal {

namespace {

constexpr std::size_t kMaxMismatchMessages = 64;
constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;  // x86-64 and most arm64 kernels

// What one recording learned and the plan made from it. Immutable once built.
struct Plan {
  std::string key;
  std::vector<std::size_t> sizes;    // by allocation index, in the order the region asked
  std::vector<bool> escapes;         // alive at region end: an output, never planned
  std::vector<std::size_t> offsets;  // valid where !escapes
  // The distinct offsets of planned allocations, ascending, and each allocation's rank among them:
  // live allocations never share bytes, so an address in the block names at most one live one.
  std::vector<std::size_t> distinct_offsets;
  std::vector<std::uint32_t> offset_rank;  // valid where !escapes
  // For allocation j: the earlier planned allocations that share bytes with it. They must all be
  // freed before j may be served from the block.
  std::vector<std::vector<std::uint32_t>> must_be_freed;
  ArenaPlanSummary summary;
};

// One pre-allocated block for one plan, used by one run at a time. Lifetime is one reference
// count: one reference for the arena while it keeps the block, one per tensor served from it.
// Whoever drops the last one deletes the block, and nobody touches it after their own decrement.
// While a run uses the block, the count carries kRunBias instead of per-tensor references: the
// running thread counts what it serves and frees in plain integers (no atomic read-modify-write
// per allocation) and folds the difference in when the run ends, while frees from other threads
// decrement the count as always; the bias keeps those from reaching zero meanwhile.
struct Block final : track::ServedMemory {
  static constexpr std::int64_t kRunBias = std::int64_t{1} << 40;

  std::shared_ptr<const Plan> plan;
  char* memory = nullptr;
  std::size_t bytes = 0;
  std::size_t memory_size = 0;                // what was allocated: bytes rounded up
  std::unique_ptr<std::atomic<bool>[]> live;  // by allocation index
  // By offset rank: 1 + the index of the allocation live there now, 0 when none is.
  std::unique_ptr<std::atomic<std::uint32_t>[]> live_at_offset;
  std::atomic<std::int64_t> references{1};
  // Set when the arena lets go of the block while tensors served from it are still alive: the
  // arena's count of such bytes, which outlives the arena and drops when the block is deleted.
  std::shared_ptr<std::atomic<std::int64_t>> retired_bytes;

  // What a block for a plan of `bytes` allocates. At least one cache line, so an empty plan still
  // has a valid block; with huge pages, whole 2 MiB pages: the kernel backs them with huge pages
  // when transparent huge pages are enabled ("always", or "madvise" as asked here), cutting the TLB
  // misses of large activations.
  static std::size_t memorySize(std::size_t bytes, bool huge_pages) {
    std::size_t size = std::max<std::size_t>(plan::alignUp(bytes, 64), 64);
    return huge_pages && size >= kHugePageBytes ? plan::alignUp(size, kHugePageBytes) : size;
  }

  Block(std::shared_ptr<const Plan> block_plan, std::size_t block_bytes, bool huge_pages)
      : plan(std::move(block_plan)),
        bytes(block_bytes),
        memory_size(memorySize(block_bytes, huge_pages)) {
    // What may throw comes first or frees the block itself: a constructor that throws runs no
    // destructor.
    live.reset(new std::atomic<bool>[plan->sizes.size()]);
    for (std::size_t i = 0; i < plan->sizes.size(); ++i) live[i] = false;
    live_at_offset.reset(new std::atomic<std::uint32_t>[plan->distinct_offsets.size()]);
    for (std::size_t r = 0; r < plan->distinct_offsets.size(); ++r) live_at_offset[r] = 0;
    bool whole_huge_pages = huge_pages && memory_size >= kHugePageBytes;
    memory =
        static_cast<char*>(std::aligned_alloc(whole_huge_pages ? kHugePageBytes : 64, memory_size));
    if (memory == nullptr) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
    if (whole_huge_pages) madvise(memory, memory_size, MADV_HUGEPAGE);  // best effort
#endif
    try {
      track::Engine::instance().registerServedMemory(memory, memory_size, this);
    } catch (...) {
      std::free(memory);
      throw;
    }
    MEMSEAL_POISON(memory, memory_size);
  }
  ~Block() override {
    track::Engine::instance().unregisterServedMemory(memory);
    if (retired_bytes) retired_bytes->fetch_sub(static_cast<std::int64_t>(memory_size));
    MEMSEAL_UNPOISON(memory, memory_size);
    std::free(memory);
  }

  bool contains(const void* data) const {
    auto address = reinterpret_cast<std::uintptr_t>(data);
    auto begin = reinterpret_cast<std::uintptr_t>(memory);
    return address >= begin && address < begin + memory_size;
  }

  void beginRun() { references.fetch_add(kRunBias, std::memory_order_acq_rel); }
  // `served_minus_freed`: tensors the running thread served and did not free itself. Afterwards the
  // count is again one for the arena plus one per live tensor.
  void endRun(std::int64_t served_minus_freed) {
    references.fetch_add(served_minus_freed - kRunBias, std::memory_order_acq_rel);
  }

  // The DataPtr of allocation `index`, counted by the running thread (see kRunBias): simple, so
  // raw_allocate works, and freed by address.
  c10::DataPtr serve(std::uint32_t index) {
    char* data = memory + plan->offsets[index];
    MEMSEAL_UNPOISON(data, plan->sizes[index]);
    live[index].store(true, std::memory_order_release);
    live_at_offset[plan->offset_rank[index]].store(index + 1, std::memory_order_release);
    return c10::DataPtr(data, data, &track::Engine::trackedFree, c10::Device(c10::DeviceType::CPU));
  }

  // A free by the thread running this block: counted by it, never the last reference.
  bool releaseByRunner(void* data, std::int64_t& freed_by_runner) {
    if (!contains(data)) return false;
    std::atomic<std::uint32_t>* slot = liveSlot(data);
    // Only a double free (undefined with any allocator) could race with this on the same slot.
    std::uint32_t live_here = slot != nullptr ? slot->load(std::memory_order_acquire) : 0;
    if (live_here == 0) return reportForeignFree(data);
    slot->store(0, std::memory_order_release);
    markFreed(data, live_here - 1);
    ++freed_by_runner;
    return true;
  }

  // A free from any other thread, or after the run.
  bool releaseServed(void* data) override {
    if (!contains(data)) return false;
    std::atomic<std::uint32_t>* slot = liveSlot(data);
    std::uint32_t live_here = slot != nullptr ? slot->exchange(0, std::memory_order_acq_rel) : 0;
    if (live_here == 0) return reportForeignFree(data);
    markFreed(data, live_here - 1);
    release();  // may delete this block: the last thing done here
    return true;
  }

  // Tensors served from this block and still alive (only meaningful to the thread that ran it,
  // after endRun).
  std::int64_t liveTensors() const { return references.load(std::memory_order_acquire) - 1; }
  void release() {
    if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  // Live allocations never share bytes, so an address names at most one live allocation: the one
  // whose offset it starts at. Null when no planned allocation starts there.
  std::atomic<std::uint32_t>* liveSlot(const void* data) const {
    std::size_t offset = static_cast<std::size_t>(static_cast<const char*>(data) - memory);
    const std::vector<std::size_t>& offsets = plan->distinct_offsets;
    auto found = std::lower_bound(offsets.begin(), offsets.end(), offset);
    if (found == offsets.end() || *found != offset) return nullptr;
    return &live_at_offset[static_cast<std::size_t>(found - offsets.begin())];
  }
  void markFreed(void* data, std::uint32_t index) {
    MEMSEAL_POISON(data, plan->sizes[index]);
    live[index].store(false, std::memory_order_release);
  }
  // Inside the block but not a live allocation's start: a double free or a foreign pointer.
  // Leaking is safe; freeing would corrupt the block.
  static bool reportForeignFree(const void* data) {
    std::fprintf(stderr, "memseal arena: free of %p, which is not a live arena allocation\n", data);
    return true;
  }
};

// ---- recording ----

struct Recording {
  std::mutex mutex;
  std::uint32_t clock = 0;
  bool ended = false;
  std::vector<std::size_t> sizes;
  std::vector<std::uint32_t> first_use;
  std::vector<std::uint32_t> last_use;
  std::vector<bool> freed;
};

struct RecordedAllocation {
  std::shared_ptr<Recording> recording;
  std::uint32_t index;
  void* original_context;
  c10::DeleterFnPtr original_deleter;
};

void recordedFree(void* context) {
  auto* allocation = static_cast<RecordedAllocation*>(context);
  {
    std::lock_guard<std::mutex> lock(allocation->recording->mutex);
    if (!allocation->recording->ended) {
      allocation->recording->last_use[allocation->index] = allocation->recording->clock++;
      allocation->recording->freed[allocation->index] = true;
    }
  }
  allocation->original_deleter(allocation->original_context);
  delete allocation;
}

class RecordingRegion final : public track::ArenaRegion {
 public:
  RecordingRegion() : recording_(std::make_shared<Recording>()) {}

  c10::DataPtr serve(std::size_t) override { return {}; }

  c10::DataPtr observe(c10::DataPtr allocation, std::size_t bytes) override {
    void* data = allocation.get();
    if (data == nullptr) return allocation;
    auto* recorded =
        new RecordedAllocation{recording_, 0, allocation.get_context(), allocation.get_deleter()};
    {
      std::lock_guard<std::mutex> lock(recording_->mutex);
      recorded->index = static_cast<std::uint32_t>(recording_->sizes.size());
      recording_->sizes.push_back(bytes);
      recording_->first_use.push_back(recording_->clock++);
      recording_->last_use.push_back(0);
      recording_->freed.push_back(false);
    }
    c10::Device device = allocation.device();
    allocation.release_context();
    return c10::DataPtr(data, recorded, &recordedFree, device);
  }

  // Stops recording (later frees are of outputs) and builds the plan.
  std::shared_ptr<Plan> finish(const std::string& key) {
    std::lock_guard<std::mutex> lock(recording_->mutex);
    recording_->ended = true;
    auto result = std::make_shared<Plan>();
    Plan& plan = *result;
    plan.key = key;
    plan.sizes = recording_->sizes;
    std::size_t count = plan.sizes.size();
    plan.escapes.assign(count, false);
    plan.offsets.assign(count, 0);
    plan.must_be_freed.resize(count);
    std::vector<plan::PlannedAllocation> planned;
    std::vector<std::uint32_t> planned_index;
    for (std::size_t i = 0; i < count; ++i) {
      if (!recording_->freed[i]) {
        plan.escapes[i] = true;
        continue;
      }
      planned.push_back({plan.sizes[i], recording_->first_use[i], recording_->last_use[i]});
      planned_index.push_back(static_cast<std::uint32_t>(i));
    }
    plan::OffsetPlan offsets = plan::planOffsets(planned);
    for (std::size_t p = 0; p < planned.size(); ++p)
      plan.offsets[planned_index[p]] = offsets.offsets[p];
    plan.distinct_offsets = offsets.offsets;
    std::sort(plan.distinct_offsets.begin(), plan.distinct_offsets.end());
    plan.distinct_offsets.erase(
        std::unique(plan.distinct_offsets.begin(), plan.distinct_offsets.end()),
        plan.distinct_offsets.end());
    plan.offset_rank.assign(count, 0);
    for (std::size_t p = 0; p < planned.size(); ++p) {
      plan.offset_rank[planned_index[p]] = static_cast<std::uint32_t>(
          std::lower_bound(plan.distinct_offsets.begin(), plan.distinct_offsets.end(),
                           offsets.offsets[p]) -
          plan.distinct_offsets.begin());
    }
    // Conflicts: pairs of planned allocations whose bytes overlap (so their lifetimes do not); the
    // later one must wait for the earlier one's free. A sweep in offset order visits only
    // overlapping pairs, not all n^2 of them.
    std::vector<std::size_t> by_offset(planned.size());
    for (std::size_t p = 0; p < planned.size(); ++p) by_offset[p] = p;
    std::sort(by_offset.begin(), by_offset.end(), [&](std::size_t a, std::size_t b) {
      return offsets.offsets[a] < offsets.offsets[b];
    });
    for (std::size_t i = 0; i < by_offset.size(); ++i) {
      std::size_t a = by_offset[i];
      std::size_t a_end = offsets.offsets[a] + planned[a].size;
      // Every later b in this order starts at or after a; it overlaps a while it starts before a
      // ends.
      for (std::size_t j = i + 1; j < by_offset.size() && offsets.offsets[by_offset[j]] < a_end;
           ++j) {
        std::size_t b = by_offset[j];
        std::uint32_t earlier = planned_index[std::min(a, b)];
        std::uint32_t later = planned_index[std::max(a, b)];
        plan.must_be_freed[later].push_back(earlier);
      }
    }
    plan.summary.key = key;
    plan.summary.block_bytes = offsets.block_size;
    plan.summary.lower_bound = offsets.lower_bound;
    plan.summary.naive_sum = offsets.naive_sum;
    plan.summary.planned_allocations = planned.size();
    plan.summary.escaping_allocations = count - planned.size();
    plan.summary.strategy = offsets.strategy;
    return result;
  }

 private:
  std::shared_ptr<Recording> recording_;
};

// ---- replay ----

class ReplayRegion final : public track::ArenaRegion {
 public:
  explicit ReplayRegion(Block* block) : block_(block), plan_(*block->plan) { block_->beginRun(); }
  ~ReplayRegion() override { endRun(); }
  ReplayRegion(const ReplayRegion&) = delete;
  ReplayRegion& operator=(const ReplayRegion&) = delete;

  c10::DataPtr serve(std::size_t bytes) override {
    std::uint32_t index = next_++;
    if (index >= plan_.sizes.size()) {
      mismatch("allocation #" + std::to_string(index) + " (" +
               report::bytesText(static_cast<std::int64_t>(bytes)) + ") is beyond the " +
               std::to_string(plan_.sizes.size()) + " allocations recorded");
      return {};
    }
    if (plan_.escapes[index]) {
      ++outputs_;
      return {};
    }
    if (bytes != plan_.sizes[index]) {
      mismatch("allocation #" + std::to_string(index) + " asked for " + std::to_string(bytes) +
               " bytes; the recording made " + std::to_string(plan_.sizes[index]) +
               " (another input shape under the same key?)");
      return {};
    }
    for (std::uint32_t earlier : plan_.must_be_freed[index]) {
      if (block_->live[earlier].load(std::memory_order_acquire)) {
        mismatch("allocation #" + std::to_string(index) + " would reuse the bytes of allocation #" +
                 std::to_string(earlier) +
                 ", which the recording freed before it but is still alive");
        return {};
      }
    }
    ++served_;
    return block_->serve(index);
  }

  c10::DataPtr observe(c10::DataPtr allocation, std::size_t) override { return allocation; }
  bool releaseOnThisThread(void* data) override {
    return block_->releaseByRunner(data, freed_by_runner_);
  }

  // After the region (also when it threw): the block's count is exact again, so liveTensors() can
  // decide its fate. Later frees on this thread take the path of any other thread.
  void endRun() {
    if (run_ended_) return;
    run_ended_ = true;
    block_->endRun(served_ - freed_by_runner_);
  }

  std::uint32_t allocationsMade() const { return next_; }

  void mismatch(std::string message) {
    ++fallbacks_;
    if (first_mismatch_.empty()) first_mismatch_ = std::move(message);
  }

  std::int64_t served_ = 0;
  std::int64_t freed_by_runner_ = 0;
  std::int64_t fallbacks_ = 0;
  std::int64_t outputs_ = 0;
  std::string first_mismatch_;

 private:
  Block* block_;
  const Plan& plan_;
  std::uint32_t next_ = 0;
  bool run_ended_ = false;
};

// Sets and clears this thread's region, also when the region throws (nesting is refused earlier,
// by InRunGuard). The allocator hook itself is held by the arena for its whole life: installing it
// per run would cost two SetCPUAllocator calls.
class RegionGuard {
 public:
  explicit RegionGuard(track::ArenaRegion* region) { track::threadState().arena_region = region; }
  ~RegionGuard() { track::threadState().arena_region = nullptr; }
  RegionGuard(const RegionGuard&) = delete;
  RegionGuard& operator=(const RegionGuard&) = delete;
};

}  // namespace

struct PlannedArena::Impl {
  struct Entry {
    std::shared_ptr<const Plan> plan;  // null: the key cannot be planned (over budget)
    std::vector<Block*> free_blocks;
    std::int64_t blocks_in_use = 0;
    std::uint64_t last_used = 0;
    bool warned = false;
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
  void retire(Block* block) {
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
      for (Block* block : victim->second.free_blocks) retire(block);
      entries.erase(victim);
      ++stats.evicted_plans;
    }
    return true;
  }
};

PlannedArena::PlannedArena(ArenaOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->options = options;
  track::Engine::instance().acquireAllocatorHook();
}

PlannedArena::~PlannedArena() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (auto& [key, entry] : impl_->entries) {
      for (Block* block : entry.free_blocks) impl_->retire(block);
      entry.free_blocks.clear();
    }
  }
  track::Engine::instance().releaseAllocatorHook();
}

namespace {

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

}  // namespace

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
  Impl& impl = *impl_;
  Impl::Entry* entry = nullptr;  // stays valid while this run holds one of its blocks: makeRoom
                                 // evicts no entry with blocks in use
  Block* block = nullptr;
  bool record = false;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    auto found = impl.entries.find(key);
    if (found == impl.entries.end()) {
      record = true;
    } else {
      entry = &found->second;
      entry->last_used = ++impl.tick;
      if (const std::shared_ptr<const Plan>& plan = entry->plan) {
        // Room for the block to come back without allocating: returning it cannot fail then.
        entry->free_blocks.reserve(entry->free_blocks.size() +
                                   static_cast<std::size_t>(entry->blocks_in_use) + 1);
        if (!entry->free_blocks.empty()) {
          block = entry->free_blocks.back();
          entry->free_blocks.pop_back();
        } else if (impl.makeRoom(
                       Block::memorySize(plan->summary.block_bytes, impl.options.huge_pages),
                       key)) {
          block = new Block(plan, plan->summary.block_bytes, impl.options.huge_pages);
          impl.stats.reserved_bytes += block->memory_size;
        }
        if (block != nullptr) ++entry->blocks_in_use;
      }
      if (block == nullptr) ++impl.stats.unplanned_runs;
    }
  }

  if (record) {
    RecordingRegion recording;
    {
      RegionGuard guard(&recording);
      region();
    }
    std::shared_ptr<Plan> made = recording.finish(key);
    std::lock_guard<std::mutex> lock(impl.mutex);
    ++impl.stats.recordings;
    Impl::Entry& recorded = impl.entries[key];
    recorded.last_used = ++impl.tick;
    if (Block::memorySize(made->summary.block_bytes, impl.options.huge_pages) >
        impl.options.max_bytes) {
      impl.note("key " + key + ": the plan needs " +
                report::bytesText(static_cast<std::int64_t>(made->summary.block_bytes)) +
                ", above the arena's max_bytes; runs under this key use the normal allocator");
    } else {
      recorded.plan = std::move(made);
    }
    return;
  }
  if (block == nullptr) {
    region();  // no plan possible: the normal allocator serves this run
    return;
  }

  ReplayRegion replay(block);
  try {
    RegionGuard guard(&replay);
    region();
  } catch (...) {
    replay.endRun();
    std::lock_guard<std::mutex> lock(impl.mutex);
    --entry->blocks_in_use;
    ++impl.stats.retired_blocks;
    impl.retire(block);  // its tensors may be anywhere in the unwinding code
    throw;
  }
  replay.endRun();
  // Read before the block may go: a retired block dies with its last tensor, on any thread.
  const std::size_t allocations_recorded = block->plan->sizes.size();
  const bool made_fewer = replay.allocationsMade() < allocations_recorded;
  std::lock_guard<std::mutex> lock(impl.mutex);
  // The block and the counts first: what follows composes messages, which may throw.
  --entry->blocks_in_use;
  std::int64_t still_alive = block->liveTensors();
  if (still_alive > 0) {
    // A tensor planned to die inside the region is still alive: this block must not be reused.
    ++impl.stats.retired_blocks;
    impl.retire(block);
  } else {
    entry->free_blocks.push_back(block);  // within the capacity reserved when it was taken
  }
  ++impl.stats.replays;
  impl.stats.served_allocations += replay.served_;
  impl.stats.fallback_allocations += replay.fallbacks_ + (made_fewer ? 1 : 0);
  impl.stats.output_allocations += replay.outputs_;
  if (made_fewer) {
    replay.mismatch("the run made " + std::to_string(replay.allocationsMade()) +
                    " allocations; the recording made " + std::to_string(allocations_recorded));
  }
  if (!replay.first_mismatch_.empty()) {
    ++impl.stats.mismatched_runs;
    std::string message = "key " + key + ": " + replay.first_mismatch_ + " (" +
                          std::to_string(replay.fallbacks_) +
                          " allocation(s) fell back to the normal allocator)";
    impl.note(message);
    if (impl.options.warn_on_mismatch && !entry->warned) {
      entry->warned = true;
      std::cerr << "memseal arena: " << message << "\n";
    }
  }
  if (still_alive > 0) {
    impl.note("key " + key + ": " + std::to_string(still_alive) +
              " tensor(s) planned to be freed inside the region are still alive at its end; "
              "their block is retired until they are freed");
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
