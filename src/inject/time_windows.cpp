#include "inject/time_windows.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "common/text.h"
#include "inject/python_lock.h"
#include "inject/step_ledger.h"
#include "inject/step_tuning.h"
#include "track/device_events.h"
#include "track/memory_counters.h"

namespace memseal::inject {

std::int64_t memoryActivity() {
  DeviceStats cpu = track::cpuCounters().read("cpu");
  std::int64_t activity = cpu.allocations_total + cpu.frees_total;
  track::readDeviceLedger([&](const track::DeviceMemoryLedger& ledger) {
    for (int device : ledger.devices()) {
      track::DeviceMemoryTotals totals = ledger.totals(device);
      activity += static_cast<std::int64_t>(totals.block_allocs + totals.block_frees);
    }
  });
  return activity;
}

namespace {

// "250 ms", "2 s": the --interval the user gave, as the report says it.
std::string durationText(std::chrono::nanoseconds duration) {
  char text[32];
  double ms = static_cast<double>(duration.count()) / 1e6;
  if (ms >= 1000) {
    std::snprintf(text, sizeof(text), "%g s", ms / 1000);
  } else {
    std::snprintf(text, sizeof(text), "%g ms", ms);
  }
  return text;
}

}  // namespace

std::chrono::nanoseconds TimeWindows::untilEnd(Clock::time_point now) const {
  std::chrono::nanoseconds left = next_end_.load() - now;
  return std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0));
}

TimeWindows::Window TimeWindows::check(Clock::time_point now, std::int64_t activity) {
  if (now < next_end_.load()) return Window::kRunning;
  if (activity == activity_.exchange(activity)) {
    next(now);
    return Window::kEmpty;
  }
  return Window::kStep;
}

void TimeWindows::next(Clock::time_point now) {
  std::chrono::nanoseconds length =
      length_ > std::chrono::nanoseconds::zero() ? length_ : runSizedWindow(now - started_);
  next_end_.store(now + length);
}

IntervalSteps::IntervalSteps(std::chrono::nanoseconds length, StepLedger& ledger)
    : length_(length), ledger_(ledger), windows_(length, Clock::now()) {
  windows_.endNextAt(Clock::now() +
                     (length > std::chrono::nanoseconds::zero() ? length : kShortestWindow));
}

std::chrono::nanoseconds IntervalSteps::untilNextTick() const {
  return windows_.untilEnd(Clock::now());
}

void IntervalSteps::tick() {
  Clock::time_point now = Clock::now();
  if (windows_.check(now, memoryActivity()) != TimeWindows::Window::kStep) return;
  bool taken;
  {
    PythonLock python;
    std::lock_guard<std::mutex> lock(ledger_.mutex());
    taken = ledger_.takeLocked(now, false);
  }
  windows_.next(now);
  if (!taken) return;
  steps_.fetch_add(1);
  ledger_.afterStep();
}

std::vector<std::string> IntervalSteps::description() {
  std::string steps = " (" + common::countedText(steps_.load(), "step") + ")";
  if (length_ == std::chrono::nanoseconds::zero()) {
    return {"time windows sized to the run, from " + durationText(kShortestWindow) + steps};
  }
  return {"time windows of " + durationText(length_) + " (--interval)" + steps};
}

}  // namespace memseal::inject
