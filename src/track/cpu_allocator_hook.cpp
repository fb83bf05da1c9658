// The tracker's hot path. Order on every allocation, as in heaptrack: recursion guard, enabled
// flag, capture into fixed buffers, and only then shared state (one sharded lock, two atomics).
// Nothing here allocates through the allocator being tracked; tables grow with calloc, rarely.
#include "track/cpu_allocator_hook.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <new>

#include "common/branch_hints.h"
#include "track/arena_region.h"
#include "track/collected_frees.h"
#include "track/counted_steps.h"
#include "track/event_trace.h"
#include "track/live_table.h"
#include "track/memory_counters.h"
#include "track/op_sampling.h"
#include "track/record_context.h"
#include "track/served_memory.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/site_totals.h"
#include "track/tensor_reference.h"

namespace memseal::track {

namespace {

thread_local ThreadState t_thread_state{};

}  // namespace

// In a shared library a thread_local is reached through __tls_get_addr, and GCC computes that
// address again after every call rather than keep it in a register: ten lookups per allocation.
// Read through a call it cannot inline, the address is a plain value the hook keeps.
[[gnu::noinline]] MEMSEAL_HOT ThreadState& threadState() { return t_thread_state; }

namespace {

// Adopted DataPtrs (arena recordings): data -> their real context and deleter.
LiveTable& adoptedAllocations() {
  static auto* table = new LiveTable();  // never destroyed, see session.h
  return *table;
}

// Takes `inner` by reference: what it does not hand back tracked stays in the caller's DataPtr, and
// the allocation is not moved into a parameter and out again.
c10::DataPtr trackAllocation(ThreadState& state, c10::DataPtr& inner, std::size_t bytes);

// Forwards to whatever CPU allocator was installed before, and records what it hands out while a
// session is active.
class InterposingCpuAllocator final : public c10::Allocator {
 public:
  MEMSEAL_HOT c10::DataPtr allocate(std::size_t bytes) override {
    ThreadState& state = threadState();
    c10::Allocator* system = previous.load(std::memory_order_acquire);
    // Zero-byte requests get no memory (libtorch's allocator returns a null pointer): not an
    // allocation to count, track, record or plan.
    if (MEMSEAL_UNLIKELY(bytes == 0)) return system->allocate(0);
    ArenaRegion* region = state.in_tracker ? nullptr : state.arena_region;
    if (region != nullptr) {
      // From a planned block (already a simple DataPtr): neither a system allocator call nor
      // tracked.
      c10::DataPtr served = region->serve(bytes);
      if (served) return served;
    }
    ++state.system_allocations;
    c10::DataPtr inner = system->allocate(bytes);
    if (region != nullptr) inner = adoptAllocation(region->observe(std::move(inner), bytes));
    if (MEMSEAL_UNLIKELY(state.in_tracker || !sessionActive())) return inner;
    countAllocationTowardsStep(state);
    return trackAllocation(state, inner, bytes);
  }
  // raw_allocate/raw_deallocate work: tracked pointers carry data == context, and trackedFree
  // hands pointers it does not know to the previous allocator's raw deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &trackedFree; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  std::atomic<c10::Allocator*> previous{nullptr};
};

InterposingCpuAllocator& interposer() {
  static auto* allocator = new InterposingCpuAllocator();  // never destroyed, see session.h
  return *allocator;
}

struct HookInstallation {
  std::mutex mutex;
  int users = 0;
  bool high_priority = false;
};

HookInstallation& installation() {
  static auto* state = new HookInstallation();
  return *state;
}

// What a record says of the allocation itself, whichever path writes it; the site and signature
// are the path's own.
[[gnu::always_inline]] inline void describeAllocation(LiveRecord& record, const c10::DataPtr& inner,
                                                      std::size_t bytes,
                                                      std::uint64_t thread_serial,
                                                      const RecordContext& context,
                                                      std::uint32_t thread_slot) {
  record.data = inner.get();
  record.original_deleter = inner.get_deleter();
  record.original_context = inner.get_context();
  record.bytes = bytes;
  record.thread_serial = thread_serial;
  applyRecordContext(context, record);
  record.thread_slot = thread_slot;
}

// What every tracked allocation does once its record is in the table: the table owns the memory's
// context now, and the counters and the site's totals take it in.
[[gnu::always_inline]] inline c10::DataPtr finishTracking(ThreadState& state, c10::DataPtr& inner,
                                                          std::size_t bytes, std::uint32_t site) {
  void* data = inner.get();
  c10::Device device = inner.device();
  inner.release_context();
  cpuCounters().onAllocate(state, static_cast<std::int64_t>(bytes));
  ++state.allocations_in_thread;
  state.bytes_in_thread += bytes;
  addToSiteTotals(state, site, static_cast<std::int64_t>(bytes));
  return c10::DataPtr(data, data, &trackedFree, device);
}

// Every allocation that does not replay a recorded one (a watched step, a replay that stopped
// matching, ops watched on every step) or that the event trace records: the record is built on
// the stack, where attributing it may call out (stacks, the site table), then copied in.
[[gnu::noinline]] c10::DataPtr trackAllocationSlowly(ThreadState& state, c10::DataPtr& inner,
                                                     std::size_t bytes, std::uint64_t thread_serial,
                                                     const RecordContext& context,
                                                     std::uint32_t thread_slot) {
  LiveRecord record;
  describeAllocation(record, inner, bytes, thread_serial, context, thread_slot);
  attributeAllocation(state, record);
  if (MEMSEAL_UNLIKELY(!liveAllocations().insert(record))) {
    // Could not grow the table: this allocation goes untracked, still correct.
    return std::move(inner);
  }
  traceAllocation(record);
  return finishTracking(state, inner, bytes, record.site);
}

c10::DataPtr trackAllocation(ThreadState& state, c10::DataPtr& inner, std::size_t bytes) {
  void* data = inner.get();
  if (MEMSEAL_UNLIKELY(data == nullptr)) return std::move(inner);
  TrackerWork work(state);
  std::uint64_t thread_serial = ++state.allocation_serial;
  RecordContext context = currentRecordContext(state);
  std::uint32_t thread_slot = cpuCounters().threadSlot(state);
  const SequenceEntry* replayed =
      replayedAllocation(state, context.step, context.session, thread_serial, bytes);
  if (MEMSEAL_UNLIKELY(replayed == nullptr ||
                       g_session.event_trace_running.load(std::memory_order_relaxed))) {
    return trackAllocationSlowly(state, inner, bytes, thread_serial, context, thread_slot);
  }
  // The common case, a replayed step: the record is written in its slot, with nothing left to call.
  bool inserted = liveAllocations().insertWith(data, [&](LiveRecord& slot) {
    // Default-initialised in place: the fields written below are not written twice (the compiler
    // drops the first stores), and a field added to LiveRecord starts from its default here too.
    auto* record = new (&slot) LiveRecord;
    describeAllocation(*record, inner, bytes, thread_serial, context, thread_slot);
    record->site = replayed->site;
    record->signature = replayed->signature;
  });
  if (MEMSEAL_UNLIKELY(!inserted)) return std::move(inner);  // as in trackAllocationSlowly
  return finishTracking(state, inner, bytes, replayed->site);
}

}  // namespace

void acquireAllocatorHook() {
  HookInstallation& hook_state = installation();
  std::lock_guard<std::mutex> lock(hook_state.mutex);
  if (hook_state.users++ > 0) return;
  InterposingCpuAllocator& hook = interposer();
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current == &hook) return;
  hook.previous.store(current, std::memory_order_release);
  c10::SetCPUAllocator(&hook, 0);
  hook_state.high_priority = false;
  if (c10::GetCPUAllocator() != &hook) {
    // Someone registered theirs with a priority above the default; we still wrap it.
    c10::SetCPUAllocator(&hook, UINT8_MAX);
    hook_state.high_priority = true;
  }
}

void releaseAllocatorHook() {
  HookInstallation& hook_state = installation();
  std::lock_guard<std::mutex> lock(hook_state.mutex);
  if (hook_state.users == 0 || --hook_state.users > 0) return;
  InterposingCpuAllocator& hook = interposer();
  // Restore only if nobody replaced us meanwhile; `previous` stays set so late frees still work.
  if (c10::GetCPUAllocator() == &hook) {
    c10::SetCPUAllocator(hook.previous.load(), hook_state.high_priority ? UINT8_MAX : 0);
  }
}

void setThreadArenaRegion(ArenaRegion* region) { t_thread_state.arena_region = region; }

c10::DataPtr servedDataPtr(void* data) {
  return c10::DataPtr(data, data, &trackedFree, c10::Device(c10::DeviceType::CPU));
}

c10::DataPtr adoptAllocation(c10::DataPtr inner) {
  void* data = inner.get();
  // Already simple: the system allocator's own DataPtr (raw_deallocate reaches its raw deleter
  // through trackedFree's fallback), or one of ours.
  if (data == nullptr || inner.get_context() == data) return inner;
  LiveRecord record;
  record.data = data;
  record.original_context = inner.get_context();
  record.original_deleter = inner.get_deleter();
  bool inserted = false;
  {
    TrackerWork work;
    inserted = adoptedAllocations().insert(record);
  }
  if (!inserted) return inner;
  c10::Device device = inner.device();
  inner.release_context();
  return c10::DataPtr(data, data, &trackedFree, device);
}

namespace {

// A pointer with our deleter but no live record: an adopted or served one, or raw_deallocate of
// memory we never tracked. Out of line, so the common free's code stays short.
[[gnu::cold, gnu::noinline]] void freeUntracked(void* data) {
  LiveRecord record;
  if (adoptedAllocations().remove(data, &record)) {
    record.original_deleter(record.original_context);
    return;
  }
  if (releaseServedAnywhere(data)) return;
  c10::Allocator* system = interposer().previous.load(std::memory_order_acquire);
  c10::DeleterFnPtr previous = system != nullptr ? system->raw_deleter() : nullptr;
  if (previous != nullptr) {
    previous(data);
  } else {
    std::fprintf(stderr, "memseal: free of unknown pointer %p; leaking it rather than guessing\n",
                 data);
  }
}

}  // namespace

MEMSEAL_HOT void trackedFree(void* data) {
  if (MEMSEAL_UNLIKELY(data == nullptr)) return;  // raw_deallocate(nullptr), as oneDNN does
  ThreadState& state = threadState();
  // Planned-arena memory freed inside its region, the common case: no lock, no table.
  if (ArenaRegion* region = state.arena_region) {
    if (region->releaseOnThisThread(data)) return;
  }
  // What the free needs of its record, read under the shard's lock (no copy of the whole record).
  c10::DeleterFnPtr original_deleter = nullptr;
  void* original_context = nullptr;
  c10::TensorImpl* tensor = nullptr;
  std::int64_t bytes = 0;
  bool this_session = false;
  std::uint32_t site = 0;
  std::uint32_t allocated_at_step = 0;
  std::uint32_t session = sessionId();
  bool tracked = liveAllocations().removeWith(data, [&](const LiveRecord& record) {
    original_deleter = record.original_deleter;
    original_context = record.original_context;
    tensor = record.tensor;
    bytes = static_cast<std::int64_t>(record.bytes);
    this_session = record.session == session;
    if (this_session) traceFree(record);
    site = record.site;
    allocated_at_step = record.step;
  });
  if (MEMSEAL_UNLIKELY(!tracked)) {
    freeUntracked(data);
    return;
  }
  if (MEMSEAL_LIKELY(this_session)) {
    cpuCounters().onFree(state, bytes);
    if (MEMSEAL_UNLIKELY(state.in_collection)) noteCollectedFree(site, allocated_at_step, bytes);
  }
  if (tensor != nullptr) dropWeakTensorReference(tensor);
  original_deleter(original_context);
}

}  // namespace memseal::track
