// The public Tracker, step numbering and MEMSEAL_REGION: thin layers over the session. Snapshots
// are analysis and live in analyze/snapshot.cpp.
#include "memseal/tracker.h"

#include <atomic>

#include "track/memory_counters.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/thread_state.h"

namespace memseal {

Tracker::Tracker(TrackerOptions options) : options_(std::move(options)) {}

Tracker::~Tracker() { stop(); }

void Tracker::start() {
  if (running_) return;
  track::startSession(track::sessionOptionsFrom(options_.resolved()));
  running_ = true;
}

void Tracker::stop() {
  if (!running_) return;
  track::stopSession();
  running_ = false;
}

bool Tracker::running() const { return running_; }

DeviceStats Tracker::stats() const { return track::cpuCounters().read("cpu"); }

bool trackingActive() { return track::sessionActive(); }

void setStep(std::uint32_t step) { track::setSessionStep(step); }

std::uint32_t currentStep() { return track::currentStep(); }

namespace {
// `memseal run --step-on NAME` in a program that uses MEMSEAL_REGION: the runtime it injects asks
// to hear of every scope entered (one relaxed load per scope otherwise).
std::atomic<void (*)(const char*)> g_scope_observer{nullptr};
}  // namespace

RegionGuard::RegionGuard(const char* name) {
  if (auto observer = g_scope_observer.load(std::memory_order_relaxed)) observer(name);
  track::ThreadState& state = track::threadState();
  previous_path_ = state.scope_path;
  track::TrackerWork work;
  state.scope_path = track::siteTable().internScopePath(previous_path_, name);
}

RegionGuard::~RegionGuard() { track::threadState().scope_path = previous_path_; }

}  // namespace memseal

// Not part of the C++ API: found by name (dlsym) by the runtime `memseal run` injects.
extern "C" MEMSEAL_API void memseal_set_scope_observer(void (*observer)(const char*)) {
  memseal::g_scope_observer.store(observer, std::memory_order_relaxed);
}
