// Ops watched on some steps only (OpWatching): which steps are watched, and the attribution of the
// allocations of the other steps by replaying the last watched step's allocation sequence.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/branch_hints.h"
#include "memseal/tracker.h"
#include "track/allocation_sequence.h"
#include "track/live_record.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/thread_state.h"

namespace memseal::track {

// The schedule. With the session's control lock held.
void configureOpSchedule(const OpWatching& watching, std::uint32_t start_step);
// kAuto: every step is watched at least until `step`.
void extendOpScheduleFullPhase(std::uint32_t step);
// kAuto: the interval between watched steps starts again from `every`, then stretches again.
void restartOpScheduleStretch();
// Whether ops are watched on `step`, the step now starting; publishes the answer to the hot path.
// With kAuto, a replay that stopped matching on the step before sends the schedule back to
// watching every step for a while, twice as long each time.
bool opScheduleWatches(std::uint32_t step);
// Steps made of whole iterations of `allocations` each (memseal run's counted steps), 0: unknown.
// Within one iteration, an allocation whose size differs from the recording's by the same ratio as
// the iteration's other resized ones (a batch of another size) is still the recording's, its
// tensor's first dimension scaled; without it, any other size ends the replay of the step.
void setReplayIterationLength(std::uint64_t allocations);
// Hot path: a step's replay stopped matching its recording (kAuto answers the next step with
// watched steps again).
void noteReplayDiverged();
// True for kOneStepIn and kAuto: steps differ, and setStep must consult the schedule.
bool opScheduleVaries();

// Hot path: the recorded allocation that a new one (the thread's `thread_serial`-th, made on
// `step` of `session`) replays, or nullptr. Past warm-up nearly every allocation is the next one
// of a step being replayed that still matches its recording (same size, same MEMSEAL_REGION): it
// takes that entry's site and signature. Every other case is attributeBySequence's, and with ops
// watched on every step (steps do not vary) there is no recording to replay.
inline const SequenceEntry* replayedAllocation(const ThreadState& state, std::uint32_t step,
                                               std::uint32_t session, std::uint64_t thread_serial,
                                               std::size_t bytes) {
  if (!g_session.steps_vary.load(std::memory_order_relaxed)) return nullptr;
  const SequenceCursor& cursor = state.cpu_sequence;
  if (MEMSEAL_UNLIKELY(cursor.step != step || cursor.session != session || cursor.recording ||
                       cursor.diverged || state.cpu_recording == nullptr)) {
    return nullptr;
  }
  const SequenceEntry* recorded = state.cpu_recording->at(thread_serial - cursor.first_serial);
  if (MEMSEAL_LIKELY(recorded != nullptr && recorded->bytes == bytes &&
                     recorded->scope_path == state.scope_path)) {
    return recorded;
  }
  return nullptr;
}
// The site of a new allocation (and its tensor signature when replayed) where replayedAllocation
// found no entry: a watched step records it, a replay that stopped matching names the op unwatched,
// and without varying steps the site is simply the current one.
void attributeBySequence(ThreadState& state, LiveRecord& record);
inline void attributeAllocation(ThreadState& state, LiveRecord& record) {
  if (g_session.steps_vary.load(std::memory_order_relaxed)) {
    attributeBySequence(state, record);
  } else {
    record.site = siteTable().currentSite(state);
  }
}
// Hot path, at op end: the signature of an output made on a watched step, for later replays.
void recordOutputInSequence(ThreadState& state, const LiveRecord& record,
                            const TensorSignature& signature);

// CUDA blocks, from the allocator's trace hook (under its lock: no stack, no Python, no lock
// taken here). On a watched step the block gets its op site and is recorded; the op's end
// completes the recording with the site's stack and the tensor's signature
// (recordDeviceOutputInSequence, `record` already holding the completed site). On the other steps
// the i-th block of the thread gets the recorded i-th block's site and signature when its size and
// MEMSEAL_REGION match, else the op site of `<op not watched on this step>`.
void attributeDeviceBlockBySequence(ThreadState& state, LiveRecord& record);
void recordDeviceOutputInSequence(ThreadState& state, const LiveRecord& record,
                                  const TensorSignature& signature);

}  // namespace memseal::track
