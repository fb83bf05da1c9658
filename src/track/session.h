// The tracking session: whether tracking is on, which session and step allocations belong to, and
// starting and stopping what the hot path needs (allocator hook, op observer, op schedule). The
// state is process-wide with constant initialisation and never destroyed, because tensors allocated
// while tracking may be freed at any time later, even during static destruction.
#pragma once

#include <atomic>
#include <cstdint>

#include "memseal/tracker.h"

namespace memseal::track {

// TrackerOptions with every choice made, as the hot path reads them.
struct SessionOptions {
  StackMode stacks = StackMode::kOff;
  std::uint32_t stack_sample_every = 64;
  bool record_tensor_metadata = true;
  OpWatching ops = OpWatching::everyStep();
};
// From options resolved by TrackerOptions::resolved (every field set).
SessionOptions sessionOptionsFrom(const TrackerOptions& resolved);

// What every tracked allocation and free reads of the process-wide state, in one cache line of its
// own: between two allocations the program's work evicts the lines the hook read, and each line
// costs a miss on the next. Written only as a session starts or stops, a step begins, the op
// schedule is configured or an event trace starts or stops.
struct alignas(64) SessionState {
  std::atomic<bool> active{false};
  std::atomic<std::uint32_t> id{0};    // bumped by every start: records of older sessions differ
  std::atomic<std::uint32_t> step{0};  // the step allocations are recorded in (setStep)
  // Steps differ in what is watched (OpWatching kOneStepIn and kAuto): op_sampling.h.
  std::atomic<bool> steps_vary{false};
  std::atomic<bool> event_trace_running{false};  // event_trace.h
};
extern SessionState g_session;

inline bool sessionActive() { return g_session.active.load(std::memory_order_acquire); }
inline std::uint32_t sessionId() { return g_session.id.load(std::memory_order_acquire); }
inline std::uint32_t currentStep() { return g_session.step.load(std::memory_order_relaxed); }

// Throws std::logic_error when a session runs already.
void startSession(const SessionOptions& options);
void stopSession();
// Sets the step and, when ops are watched on some steps only, starts or stops watching them.
void setSessionStep(std::uint32_t step);
// With OpWatching::kAuto: ops are watched on every step at least until `step` (the leak detector
// asks for its warm-up and the steps its verdict needs).
void watchEveryStepUntil(std::uint32_t step);
// With OpWatching::kAuto: the next watched steps come one interval apart again, as after warm-up
// (the leak detector asks when tracked memory builds up).
void watchAtFirstInterval();
// Watches ops as `watching` says from the step now running on (a change of OpWatching mid-session).
void setSessionOpWatching(const OpWatching& watching);

}  // namespace memseal::track
