#include "inject/time_windows.h"

#include <algorithm>
#include <mutex>

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

std::vector<report::StepsTaken> IntervalSteps::stepsTaken() {
  report::WindowSteps windows;
  windows.sized_to_the_run = length_ == std::chrono::nanoseconds::zero();
  windows.length = windows.sized_to_the_run ? kShortestWindow : length_;
  windows.steps = steps_.load();
  return {windows};
}

}  // namespace memseal::inject
