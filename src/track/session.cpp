// Starting and stopping a session orders its parts so that the hot path never sees half of one:
// tables and counters are ready before the allocator hook goes in, the active flag is set last on
// start and cleared first on stop.
#include "track/session.h"

#include <pthread.h>

#include <mutex>
#include <stdexcept>

#include "track/cpu_allocator_hook.h"
#include "track/device_events.h"
#include "track/memory_counters.h"
#include "track/op_observer.h"
#include "track/op_sampling.h"
#include "track/site_table.h"
#include "track/site_totals.h"

namespace memseal::track {

SessionState g_session;

namespace {

std::mutex& controlMutex() {
  static auto* mutex = new std::mutex();  // never destroyed, see session.h
  return *mutex;
}

// The control mutex is held across fork(): a child made while another thread changed the session
// (a step's op schedule) would otherwise have it locked by a thread the child does not have, and
// could never start or stop a session of its own (memseal run's forked children do).
void holdControlAcrossFork() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { controlMutex().lock(); }, [] { controlMutex().unlock(); },
                   [] { controlMutex().unlock(); });
  });
}

// With the control mutex held: watch ops on `step` or not, as the schedule says.
void applySchedule(std::uint32_t step) { setOpsWatched(opScheduleWatches(step)); }

}  // namespace

SessionOptions sessionOptionsFrom(const TrackerOptions& resolved) {
  SessionOptions options;
  options.stacks = resolved.stacks.value_or(StackMode::kOff);
  options.stack_sample_every = resolved.stack_sample_every.value_or(64);
  options.record_tensor_metadata = resolved.record_tensor_metadata.value_or(true);
  options.ops = resolved.watch_ops.value_or(OpWatching::everyStep());
  return options;
}

void startSession(const SessionOptions& options) {
  holdControlAcrossFork();
  std::lock_guard<std::mutex> lock(controlMutex());
  if (sessionActive()) {
    throw std::logic_error("memseal: a tracker is already running in this process; stop it first");
  }
  siteTable().configureStacks(options.stacks, options.stack_sample_every);
  g_session.id.fetch_add(1, std::memory_order_acq_rel);
  cpuCounters().beginSession();
  siteTable().resetForSession();
  resetSiteTotalsForSession();
  acquireAllocatorHook();
  configureOpObserver(options.record_tensor_metadata);
  configureOpSchedule(options.ops, currentStep());
  applySchedule(currentStep());
  resetDeviceLedger();
  g_session.active.store(true, std::memory_order_release);
  attachCudaAllocatorTrace();
  seedDeviceLedgerFromAllocator();  // what CUDA holds already: the ledger started empty
}

void stopSession() {
  std::lock_guard<std::mutex> lock(controlMutex());
  if (!sessionActive()) return;
  g_session.active.store(false, std::memory_order_release);
  setOpsWatched(false);
  configureOpSchedule(OpWatching::off(), 0);
  releaseAllocatorHook();
}

void setSessionStep(std::uint32_t step) {
  if (sessionActive()) {
    endDeviceStep(currentStep());  // the step that ends now
    // CUDA may have been initialised during it: what it allocated before the hook was attached
    // goes into the ledger from the allocator's snapshot.
    if (attachCudaAllocatorTrace()) seedDeviceLedgerFromAllocator();
  }
  g_session.step.store(step, std::memory_order_relaxed);
  if (!opScheduleVaries()) return;
  std::lock_guard<std::mutex> lock(controlMutex());
  applySchedule(step);  // stop() may have run meanwhile: the schedule is off then
}

void setSessionOpWatching(const OpWatching& watching) {
  std::lock_guard<std::mutex> lock(controlMutex());
  if (!sessionActive()) return;
  configureOpSchedule(watching, currentStep());
  applySchedule(currentStep());
}

void watchEveryStepUntil(std::uint32_t step) {
  std::lock_guard<std::mutex> lock(controlMutex());
  extendOpScheduleFullPhase(step);
  applySchedule(currentStep());
}

void watchAtFirstInterval() {
  std::lock_guard<std::mutex> lock(controlMutex());
  restartOpScheduleStretch();
}

}  // namespace memseal::track
