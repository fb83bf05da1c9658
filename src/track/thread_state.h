// Per-thread state of the hot path: the recursion guard, the stack of ops being executed and the
// user scopes. Plain data with constant initialisation, so reaching it costs one TLS access.
#pragma once

#include <cstddef>
#include <cstdint>

namespace c10 {
struct AutogradState;
}

namespace memseal::track {

class AllocationSequence;
class ArenaRegion;
struct SiteTotalsCache;

constexpr int kMaxOpDepth = 32;

struct OpFrame {
  const char* name;                   // valid while the op runs (owned by its RecordFunction)
  std::uint64_t start_serial;         // the thread's allocation serial when the op started
  std::uint32_t name_id;              // interned lazily on the first allocation inside the op
  std::uint64_t device_start_serial;  // the thread's device-block serial when the op started
};

// Where a thread is in the step its allocations are recorded in (a watched step) or attributed by
// replaying the recording (the others), when ops are watched on some steps only (OpWatching).
struct SequenceCursor {
  std::uint32_t step;
  std::uint32_t session;
  std::uint64_t first_serial;  // the thread's first serial in that step
  bool recording;              // that step is watched
  bool diverged;               // that step stopped matching the recording
  // Sizes scaled in one iteration (setReplayIterationLength): the iteration, and the ratio of its
  // first resized allocation (bytes now / bytes recorded), 0 / 0 when none was resized yet.
  std::uint64_t scaled_iteration;
  std::uint64_t scale_now;
  std::uint64_t scale_recorded;
};

// The coarse clock as a thread last read it for a record, the step then, and the records left
// before it is read again (track/record_context.h).
struct CoarseClock {
  std::int64_t ns;
  std::uint32_t step;
  std::uint32_t records_left;
};

// The site a thread looked up last and its key (ops, scope, stack): a loop allocating at one place
// again and again finds its site without hashing and probing (SiteTable::siteFor). Site ids stay
// valid for the process, so the memo never goes stale; 0: none yet.
struct SiteMemo {
  std::uint32_t key[4];
  std::uint32_t site;
};

// The fields every tracked allocation and free reads or writes come first, in the struct's first
// two cache lines: between two allocations the program's own work evicts them, and each line the
// hook touches is fetched again. The op stack and the CUDA fields follow.
struct alignas(64) ThreadState {
  bool in_tracker;  // set while the tracker works, so nothing it does is tracked itself
  // Set while Python's cyclic garbage collector runs on this thread (track/collected_frees.h).
  bool in_collection;
  std::uint32_t slot;  // 1-based id of this thread, given on its first tracked allocation
  std::uint64_t allocation_serial;
  ArenaRegion* arena_region;  // the planned-arena region running on this thread, if any
  // Allocations that reached the system (previous) allocator through the interposer, ever; an
  // allocation served from a planned arena does not count.
  std::uint64_t system_allocations;
  // Tracked allocations left before this thread ends a step, 0 when it does not count them
  // (track/counted_steps.h).
  std::uint64_t allocations_until_step;
  std::uint32_t scope_path;             // interned MEMSEAL_REGION path, 0 outside any scope
  std::uint32_t lifetime_scope;         // innermost LifetimeScope's id, 0 outside any
  std::uint64_t allocations_in_thread;  // every tracked allocation on this thread, ever
  std::uint64_t bytes_in_thread;        // and their bytes
  // This thread's part of the sites' totals (track/site_totals.h), taken on its first allocation.
  SiteTotalsCache* site_totals;
  // This thread's recording of CPU allocations (track/op_sampling.cpp), kept here once reached so
  // that the hot path does not look its thread_local up again.
  AllocationSequence* cpu_recording;
  // This thread's autograd state (grad and inference modes), kept once reached: libc10 hands it
  // out through an exported function and a TLS lookup, two calls on every record otherwise. Its
  // address is fixed for the thread's life.
  const c10::AutogradState* autograd;
  CoarseClock clock;
  // Ops watched on some steps only: CPU allocations (numbered by allocation_serial) and CUDA
  // blocks (numbered by device_block_serial) are each replayed against their own recording.
  SequenceCursor cpu_sequence;
  SequenceCursor device_sequence;
  // CUDA blocks recorded on this thread (track/device_tensors.h). Apart from allocation_serial,
  // which numbers the CPU allocations that op sampling replays step by step.
  std::uint64_t device_block_serial;
  std::uint32_t sample_counter;
  // The site of the op whose end is being handled (track/op_observer.cpp), 0 until asked for:
  // its outputs' CUDA blocks and their autograd history share one stack capture.
  std::uint32_t ending_op_site;
  std::uint32_t op_depth;  // may exceed kMaxOpDepth; frames beyond it are not kept
  SiteMemo site_memo;
  OpFrame ops[kMaxOpDepth];
  // Set as the thread ends, once its site totals' cache was given back (track/site_totals.cpp).
  bool site_totals_given_back;
};
// What a replayed allocation reads of its cursor (step, session, first serial, flags) is in those
// two lines too.
static_assert(offsetof(ThreadState, cpu_sequence) + offsetof(SequenceCursor, scaled_iteration) <=
                  128,
              "the hot path's fields of ThreadState outgrew two cache lines");

ThreadState& threadState();

// Runs the tracker's own work with the recursion guard set, restoring it afterwards: nothing the
// tracker allocates meanwhile (a vector in a report, an interned string) is tracked.
class TrackerWork {
 public:
  TrackerWork() : TrackerWork(threadState()) {}
  // On the hot path, with the thread's state already at hand: one TLS lookup fewer.
  explicit TrackerWork(ThreadState& state) : state_(state), was_(state.in_tracker) {
    state_.in_tracker = true;
  }
  ~TrackerWork() { state_.in_tracker = was_; }
  TrackerWork(const TrackerWork&) = delete;
  TrackerWork& operator=(const TrackerWork&) = delete;

 private:
  ThreadState& state_;
  bool was_;
};

}  // namespace memseal::track
