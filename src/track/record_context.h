// What every record notes about the moment it was made: the coarse time, the step and session, the
// thread's lifetime scope and its autograd modes. Shared by tracked allocations (on the hot path,
// hence inline) and pool leases.
#pragma once

#include <c10/core/AutogradState.h>

#include <cstdint>
#include <ctime>

#include "common/branch_hints.h"
#include "track/live_record.h"
#include "track/session.h"
#include "track/thread_state.h"

namespace memseal::track {

// Ordering records needs no precision finer than the thread's own serial number gives; the coarse
// clock costs a fraction of the precise one.
inline std::int64_t coarseNowNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// A record's time: the coarse clock as the thread last read it, read again at the first record of
// each step and after kRecordsPerClockRead records. Even the coarse clock is a call into the vDSO
// whose code the program's own evicts between two allocations: read on every allocation it cost a
// point of a small-op loop's time.
constexpr std::uint32_t kRecordsPerClockRead = 16;
template <typename Clock>
std::int64_t recordTimeNs(ThreadState& state, std::uint32_t step, Clock&& now_ns) {
  if (MEMSEAL_UNLIKELY(state.clock.records_left == 0 || state.clock.step != step)) {
    state.clock.ns = now_ns();
    state.clock.step = step;
    state.clock.records_left = kRecordsPerClockRead;
  }
  --state.clock.records_left;
  return state.clock.ns;
}

// The moment's part of a record, read apart from the record where it is written later (the
// allocation hook writes its record under the live table's lock, where nothing may call out).
struct RecordContext {
  std::int64_t time_ns;
  std::uint32_t step;
  std::uint32_t session;
  std::uint32_t lifetime_scope;
  std::uint8_t flags;
};

inline RecordContext currentRecordContext(ThreadState& state) {
  RecordContext context;
  context.step = currentStep();
  context.time_ns = recordTimeNs(state, context.step, &coarseNowNs);
  context.session = sessionId();
  context.lifetime_scope = state.lifetime_scope;
  // Both modes from one read of autograd's thread-local state.
  if (MEMSEAL_UNLIKELY(state.autograd == nullptr)) {
    state.autograd = &c10::AutogradState::get_tls_state();
  }
  const c10::AutogradState& autograd = *state.autograd;
  context.flags = static_cast<std::uint8_t>((autograd.get_grad_mode() ? kGradMode : 0) |
                                            (autograd.get_inference_mode() ? kInferenceMode : 0));
  return context;
}

inline void applyRecordContext(const RecordContext& context, LiveRecord& record) {
  record.step = context.step;
  record.time_ns = context.time_ns;
  record.session = context.session;
  record.lifetime_scope = context.lifetime_scope;
  record.flags = context.flags;
}

inline void noteRecordContext(ThreadState& state, LiveRecord& record) {
  applyRecordContext(currentRecordContext(state), record);
}

}  // namespace memseal::track
