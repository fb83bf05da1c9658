// A step is replayed allocation by allocation against the last watched step of the same thread:
// training and inference loops repeat the same allocations every step, so the i-th allocation of a
// step is made by the same op as the i-th of the watched one when its size and scope match. From
// the first allocation that does not match, nothing is guessed.
#include "track/op_sampling.h"

#include <algorithm>
#include <atomic>

#include "common/branch_hints.h"
#include "track/allocation_sequence.h"
#include "track/site_table.h"

namespace memseal::track {

namespace {

constexpr std::uint32_t kAutoFullSteps = 8;      // watched steps before the first replay
constexpr std::uint32_t kAutoFirstBackoff = 8;   // watched steps after a replay stopped matching
constexpr std::uint32_t kAutoMaxBackoff = 1024;  // so a loop that never repeats is retried rarely
// A loop whose unwatched steps keep matching is watched ever less often: its interval doubles
// with each watched step after the first ones while no replay mismatches, up to kAutoMaxStretch
// times `every`. Each watched step costs every op's callback, and with stacks on an
// unwind wherever the step differs from the last watched one (track/step_sites.h); one after a
// long unwatched stretch finds libtorch's callback path and memseal's tables out of the caches and
// costs about a whole step more on a loop of small ops. The detector sends the interval back to
// `every` when tracked memory builds up (restartOpScheduleStretch), so the graphs of a leak that
// starts late are still seen within two intervals.
constexpr std::uint32_t kAutoWatchedBeforeStretch = 1;
constexpr std::uint32_t kAutoMaxStretch = 16;

struct Schedule {
  // Under the session's control lock.
  OpWatching watching = OpWatching::off();
  std::uint32_t full_until = 0;
  std::uint32_t last_step = 0;  // the step the schedule last answered for
  std::uint32_t backoff = kAutoFirstBackoff;
  std::uint32_t stretch = 1;                // the interval is `every` times this
  std::uint32_t watched_since_stretch = 0;  // watched steps past the full phase at this stretch
  std::uint32_t unwatched_op_name = 0;
  bool watch_next = false;  // the step after a watched one past the full phase is watched too
  // Read by the hot path: g_session.steps_vary.
  std::atomic<std::uint64_t> watched_step{0};  // (step << 1) | watched, for the step now running
  std::atomic<bool> diverged{false};           // a replay stopped matching since the last step
};
Schedule g_schedule;
std::atomic<std::uint64_t> g_iteration_length{0};

// Only touched when steps vary; freed when the thread exits. CUDA blocks have their own: the
// allocator's hook numbers them apart from CPU allocations (ThreadState::device_block_serial).
thread_local AllocationSequence t_sequence;
thread_local AllocationSequence t_device_sequence;

// Each reached once per call, as threadState() is (track/cpu_allocator_hook.cpp says why).
[[gnu::noinline]] AllocationSequence& cpuSequence() { return t_sequence; }
AllocationSequence& cpuRecordingOf(ThreadState& state) {
  if (state.cpu_recording == nullptr) state.cpu_recording = &cpuSequence();
  return *state.cpu_recording;
}
[[gnu::noinline]] AllocationSequence& deviceSequence() { return t_device_sequence; }

// The watched steps' interval starts again from `every`.
void restartStretch() {
  g_schedule.stretch = 1;
  g_schedule.watched_since_stretch = 0;
}

bool recordsStep(std::uint32_t step) {
  std::uint64_t published = g_schedule.watched_step.load(std::memory_order_acquire);
  return (published >> 1) == step && (published & 1) != 0;
}

}  // namespace

void configureOpSchedule(const OpWatching& watching, std::uint32_t start_step) {
  g_schedule.watching = watching;
  g_schedule.full_until = start_step + kAutoFullSteps;
  g_schedule.last_step = start_step;
  g_schedule.backoff = kAutoFirstBackoff;
  g_schedule.watch_next = false;
  restartStretch();
  g_schedule.diverged.store(false, std::memory_order_relaxed);
  bool varies =
      watching.mode == OpWatching::Mode::kOneStepIn || watching.mode == OpWatching::Mode::kAuto;
  if (varies && g_schedule.unwatched_op_name == 0) {
    g_schedule.unwatched_op_name = siteTable().internString("<op not watched on this step>");
  }
  g_session.steps_vary.store(varies, std::memory_order_release);
}

void noteReplayDiverged() { g_schedule.diverged.store(true, std::memory_order_relaxed); }

void extendOpScheduleFullPhase(std::uint32_t step) {
  g_schedule.full_until = std::max(g_schedule.full_until, step);
  restartStretch();  // something asked for a closer look
}

void restartOpScheduleStretch() { restartStretch(); }

void setReplayIterationLength(std::uint64_t allocations) {
  g_iteration_length.store(allocations, std::memory_order_relaxed);
}

bool opScheduleVaries() { return g_session.steps_vary.load(std::memory_order_acquire); }

bool opScheduleWatches(std::uint32_t step) {
  const OpWatching& watching = g_schedule.watching;
  bool watched = false;
  switch (watching.mode) {
    case OpWatching::Mode::kOff:
      return false;
    case OpWatching::Mode::kEveryStep:
      return true;
    case OpWatching::Mode::kOneStepIn:
      watched = step % watching.every == 0;
      break;
    case OpWatching::Mode::kAuto:
      // Numbering started again (a loop that counts its own steps from 0 after the tracker
      // started at a later number): its first steps are watched, as a new session's are.
      if (step < g_schedule.last_step) g_schedule.full_until = step + kAutoFullSteps;
      if (g_schedule.diverged.exchange(false, std::memory_order_relaxed)) {
        g_schedule.full_until = std::max(g_schedule.full_until, step + g_schedule.backoff);
        g_schedule.backoff = std::min(g_schedule.backoff * 2, kAutoMaxBackoff);
        restartStretch();
      }
      if (step < g_schedule.full_until) {
        watched = true;
        break;
      }
      // Watched steps come in pairs: a node of the autograd graph whose input is a node of the
      // step before (a running total's `+=`) is seen only with both steps watched
      // (detect/graph_nodes.h), and a total kept for an epoch has few watched steps in it.
      if (g_schedule.watch_next && step == g_schedule.last_step + 1) {
        g_schedule.watch_next = false;
        watched = true;
        break;
      }
      g_schedule.watch_next = false;
      watched = (step - g_schedule.full_until) % (watching.every * g_schedule.stretch) == 0;
      g_schedule.watch_next = watched;
      if (watched && ++g_schedule.watched_since_stretch >= kAutoWatchedBeforeStretch &&
          g_schedule.stretch < kAutoMaxStretch) {
        g_schedule.stretch *= 2;
        g_schedule.watched_since_stretch = 0;
      }
      break;
  }
  g_schedule.last_step = step;
  g_schedule.watched_step.store((std::uint64_t{step} << 1) | (watched ? 1 : 0),
                                std::memory_order_release);
  return watched;
}

namespace {

// The entry index of an allocation numbered `serial` on its thread; the first one of a new step
// starts the cursor again (and the recording, when that step is watched).
std::uint64_t sequenceIndex(SequenceCursor& cursor, AllocationSequence& sequence,
                            const LiveRecord& record, std::uint64_t serial) {
  if (MEMSEAL_UNLIKELY(cursor.step != record.step || cursor.session != record.session)) {
    if (cursor.session != record.session) sequence.clear();  // another session's
    cursor.step = record.step;
    cursor.session = record.session;
    cursor.first_serial = serial;
    cursor.recording = recordsStep(record.step);
    cursor.diverged = false;
    cursor.scale_recorded = 0;
    if (cursor.recording) sequence.clear();
  }
  return serial - cursor.first_serial;
}

// Appended only in order: after an entry that did not fit, indexes would no longer line up.
void recordInSequence(AllocationSequence& sequence, std::uint64_t index, const LiveRecord& record,
                      std::uint32_t scope_path) {
  if (index == sequence.size()) {
    sequence.append(SequenceEntry{record.bytes, record.site, scope_path, {}});
  }
}

// The recorded tensor's shape with its first dimension scaled to `bytes`, or no shape where the
// rest of the shape does not divide it.
TensorSignature scaledSignature(const TensorSignature& recorded, std::size_t recorded_bytes,
                                std::size_t bytes) {
  TensorSignature scaled = recorded;
  scaled.dims = -1;
  if (recorded.dims < 1 || recorded.dims > kMaxCachedDims) return scaled;
  std::int64_t elements = 1;
  for (int dim = 0; dim < recorded.dims; ++dim) elements *= recorded.sizes[dim];
  if (elements <= 0 || recorded_bytes % static_cast<std::size_t>(elements) != 0) return scaled;
  std::size_t item = recorded_bytes / static_cast<std::size_t>(elements);
  auto rest = static_cast<std::size_t>(elements / recorded.sizes[0]);
  if (bytes % item != 0 || (bytes / item) % rest != 0) return scaled;
  scaled.sizes[0] = static_cast<std::int64_t>(bytes / item / rest);
  scaled.dims = recorded.dims;
  return scaled;
}

// Whether an allocation of another size than the recording's is still its: in an iteration of
// known length, when its ratio to the recorded size is the iteration's first resized one's.
bool resizedAlike(SequenceCursor& cursor, std::uint64_t index, std::size_t recorded,
                  std::size_t bytes) {
  std::uint64_t length = g_iteration_length.load(std::memory_order_relaxed);
  if (length == 0 || recorded == 0) return false;
  std::uint64_t iteration = index / length;
  if (cursor.scale_recorded == 0 || cursor.scaled_iteration != iteration) {
    cursor.scaled_iteration = iteration;
    cursor.scale_now = bytes;
    cursor.scale_recorded = recorded;
    return true;
  }
  // bytes / recorded == scale_now / scale_recorded, without division (sizes are far below 2^32).
  return static_cast<unsigned __int128>(bytes) * cursor.scale_recorded ==
         static_cast<unsigned __int128>(recorded) * cursor.scale_now;
}

// A counted step longer than the watched one recorded (its number of iterations grew with the
// loop's pace): its allocations past the recording's end replay the recorded iterations again, as
// counting began only once the loop's iterations were alike in their allocations. Only a recording
// of whole iterations that was not cut off at its limit is replayed this way.
const SequenceEntry* iterationRecordedEarlier(AllocationSequence& sequence, std::uint64_t index) {
  std::uint64_t length = g_iteration_length.load(std::memory_order_relaxed);
  std::uint32_t size = sequence.size();
  if (length == 0 || size == 0 || size % length != 0 || size >= AllocationSequence::kMaxEntries) {
    return nullptr;
  }
  return sequence.at(index % size);
}

// The site and signature of the recording's allocation at `index` when it matches; false from
// the first allocation that does not (later ones of this step would be guesses).
// `may_resize`: CPU allocations, which counted steps count (CUDA blocks are numbered apart).
bool replaySequence(SequenceCursor& cursor, AllocationSequence& sequence, std::uint64_t index,
                    std::uint32_t scope_path, LiveRecord& record, bool may_resize) {
  const SequenceEntry* recorded = cursor.diverged ? nullptr : sequence.at(index);
  if (recorded == nullptr && !cursor.diverged && may_resize) {
    recorded = iterationRecordedEarlier(sequence, index);
  }
  if (MEMSEAL_LIKELY(recorded != nullptr && recorded->scope_path == scope_path)) {
    if (MEMSEAL_LIKELY(recorded->bytes == record.bytes)) {
      record.site = recorded->site;
      record.signature = recorded->signature;
      return true;
    }
    if (may_resize && resizedAlike(cursor, index, recorded->bytes, record.bytes)) {
      record.site = recorded->site;
      record.signature = scaledSignature(recorded->signature, recorded->bytes, record.bytes);
      return true;
    }
  }
  if (!cursor.diverged) {
    cursor.diverged = true;
    noteReplayDiverged();
  }
  return false;
}

// At op end on a recorded step: what the op's output showed about the recorded allocation of
// `record` (its signature, and for a CUDA block the site with its stack).
void completeSequenceEntry(const SequenceCursor& cursor, AllocationSequence& sequence,
                           const LiveRecord& record, std::uint32_t site,
                           const TensorSignature& signature) {
  if (!cursor.recording || record.step != cursor.step || record.session != cursor.session) return;
  SequenceEntry* entry = sequence.at(record.thread_serial - cursor.first_serial);
  if (entry == nullptr) return;
  if (site != 0) entry->site = site;
  entry->signature = signature;
}

}  // namespace

// Every case but the common one, which replayedAllocation finds inline.
void attributeBySequence(ThreadState& state, LiveRecord& record) {
  AllocationSequence& sequence = cpuRecordingOf(state);
  std::uint64_t index = sequenceIndex(state.cpu_sequence, sequence, record, record.thread_serial);
  if (MEMSEAL_UNLIKELY(state.cpu_sequence.recording)) {  // a watched step: rare past warm-up
    record.site = siteTable().currentSite(state, 0, record.bytes);
    recordInSequence(sequence, index, record, state.scope_path);
    return;
  }
  if (MEMSEAL_UNLIKELY(
          !replaySequence(state.cpu_sequence, sequence, index, state.scope_path, record, true))) {
    record.site = siteTable().currentSite(state, g_schedule.unwatched_op_name);
  }
}

void attributeDeviceBlockBySequence(ThreadState& state, LiveRecord& record) {
  AllocationSequence& sequence = deviceSequence();
  std::uint64_t index =
      sequenceIndex(state.device_sequence, sequence, record, record.thread_serial);
  if (state.device_sequence.recording) {
    record.site = siteTable().currentOpSite(state);  // the op's end adds the stack
    recordInSequence(sequence, index, record, state.scope_path);
    return;
  }
  if (replaySequence(state.device_sequence, sequence, index, state.scope_path, record, false)) {
    record.flags &= static_cast<std::uint8_t>(~kDeviceSitePending);  // the stack came with it
  } else {
    record.site = siteTable().currentOpSite(state, g_schedule.unwatched_op_name);
  }
}

void recordOutputInSequence(ThreadState& state, const LiveRecord& record,
                            const TensorSignature& signature) {
  completeSequenceEntry(state.cpu_sequence, cpuRecordingOf(state), record, 0, signature);
}

void recordDeviceOutputInSequence(ThreadState& state, const LiveRecord& record,
                                  const TensorSignature& signature) {
  completeSequenceEntry(state.device_sequence, deviceSequence(), record, record.site, signature);
}

}  // namespace memseal::track
