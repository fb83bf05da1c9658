// A step is replayed allocation by allocation against the last watched step of the same thread:
// training and inference loops repeat the same allocations every step, so the i-th allocation of a
// step is made by the same op as the i-th of the watched one when its size and scope match. From
// the first allocation that does not match, nothing is guessed.
#include "track/op_sampling.h"

#include <algorithm>
#include <atomic>

#include "track/allocation_sequence.h"
#include "track/device_tensors.h"
#include "track/site_table.h"

namespace memseal::track {

namespace {

constexpr std::uint32_t kAutoFullSteps = 8;      // watched steps before the first replay
constexpr std::uint32_t kAutoFirstBackoff = 8;   // watched steps after a replay stopped matching
constexpr std::uint32_t kAutoMaxBackoff = 1024;  // so a loop that never repeats is retried rarely

struct Schedule {
  // Under the session's control lock.
  OpWatching watching = OpWatching::off();
  std::uint32_t full_until = 0;
  std::uint32_t last_step = 0;  // the step the schedule last answered for
  std::uint32_t backoff = kAutoFirstBackoff;
  std::uint32_t unwatched_op_name = 0;
  // Read by the hot path: g_steps_vary.
  std::atomic<std::uint64_t> watched_step{0};  // (step << 1) | watched, for the step now running
  std::atomic<bool> diverged{false};           // a replay stopped matching since the last step
};
Schedule g_schedule;

// Only touched when steps vary; freed when the thread exits.
thread_local AllocationSequence t_sequence;

bool recordsStep(std::uint32_t step) {
  std::uint64_t published = g_schedule.watched_step.load(std::memory_order_acquire);
  return (published >> 1) == step && (published & 1) != 0;
}

}  // namespace

std::atomic<bool> g_steps_vary{false};

void configureOpSchedule(const OpWatching& watching, std::uint32_t start_step) {
  g_schedule.watching = watching;
  g_schedule.full_until = start_step + kAutoFullSteps;
  g_schedule.last_step = start_step;
  g_schedule.backoff = kAutoFirstBackoff;
  g_schedule.diverged.store(false, std::memory_order_relaxed);
  bool varies =
      watching.mode == OpWatching::Mode::kOneStepIn || watching.mode == OpWatching::Mode::kAuto;
  if (varies && g_schedule.unwatched_op_name == 0) {
    g_schedule.unwatched_op_name = siteTable().internString("<op not watched on this step>");
  }
  g_steps_vary.store(varies, std::memory_order_release);
}

void extendOpScheduleFullPhase(std::uint32_t step) {
  g_schedule.full_until = std::max(g_schedule.full_until, step);
}

bool opScheduleVaries() { return g_steps_vary.load(std::memory_order_acquire); }

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
      }
      // A program with CUDA tensors is watched on every step: a CUDA block's op and tensor are
      // only known on a watched step (the hook cannot replay them, it runs under the allocator's
      // lock), and launching a kernel costs far more than the ~0.3 us RecordFunction adds per op.
      watched = deviceBlocksRecorded() || step < g_schedule.full_until ||
                (step - g_schedule.full_until) % watching.every == 0;
      break;
  }
  g_schedule.last_step = step;
  g_schedule.watched_step.store((std::uint64_t{step} << 1) | (watched ? 1 : 0),
                                std::memory_order_release);
  return watched;
}

void attributeBySequence(ThreadState& state, LiveRecord& record) {
  if (state.sequence_step != record.step || state.sequence_session != record.session) {
    // This thread's first allocation in a new step.
    if (state.sequence_session != record.session) t_sequence.clear();  // another session's
    state.sequence_step = record.step;
    state.sequence_session = record.session;
    state.sequence_first_serial = record.thread_serial;
    state.sequence_recording = recordsStep(record.step);
    state.sequence_diverged = false;
    if (state.sequence_recording) t_sequence.clear();
  }
  std::uint64_t index = record.thread_serial - state.sequence_first_serial;
  if (state.sequence_recording) {
    record.site = siteTable().currentSite(state);
    // Appended only in order: after an entry that did not fit, indexes would no longer line up.
    if (index == t_sequence.size()) {
      t_sequence.append(SequenceEntry{record.bytes, record.site, state.scope_path, {}});
    }
    return;
  }
  const SequenceEntry* recorded = state.sequence_diverged ? nullptr : t_sequence.at(index);
  if (recorded != nullptr && recorded->bytes == record.bytes &&
      recorded->scope_path == state.scope_path) {
    record.site = recorded->site;
    record.signature = recorded->signature;
    return;
  }
  // Another allocation than on the watched step: later ones of this step would be guesses.
  if (!state.sequence_diverged) {
    state.sequence_diverged = true;
    g_schedule.diverged.store(true, std::memory_order_relaxed);
  }
  record.site = siteTable().currentSite(state, g_schedule.unwatched_op_name);
}

void recordOutputInSequence(ThreadState& state, const LiveRecord& record,
                            const TensorSignature& signature) {
  if (!state.sequence_recording || record.step != state.sequence_step ||
      record.session != state.sequence_session) {
    return;
  }
  SequenceEntry* entry = t_sequence.at(record.thread_serial - state.sequence_first_serial);
  if (entry != nullptr) entry->signature = signature;
}

}  // namespace memseal::track
