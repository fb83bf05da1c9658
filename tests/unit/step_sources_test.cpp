// The parts of `memseal run`'s step sources that decide alone (inject/step_source.h): which names
// --step-on takes, time windows (when one ends, and which are steps), the ledger every source takes
// its steps in, and the program's own steps taking over from the guessed ones, against a real leak
// detector.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "inject/framework_steps.h"
#include "inject/named_steps.h"
#include "inject/step_ledger.h"
#include "inject/step_tuning.h"
#include "inject/time_windows.h"
#include "memseal/leak_detector.h"

namespace memseal::inject {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(NamedSteps, TheNameTheUserGaveMatchesTheWholeNameOrTheLastPartOfIt) {
  EXPECT_TRUE(stepNameMatches("aten::linear", "aten::linear"));
  EXPECT_TRUE(stepNameMatches("aten::linear", "linear"));
  EXPECT_TRUE(stepNameMatches("__torch__.Model.forward", "forward"));
  EXPECT_TRUE(stepNameMatches("request", "request"));  // a named region
  EXPECT_FALSE(stepNameMatches("aten::linear", "line"));
  EXPECT_FALSE(stepNameMatches("aten::linear_backward", "linear"));
  EXPECT_FALSE(stepNameMatches("aten::linear", "aten"));
  EXPECT_FALSE(stepNameMatches(nullptr, "linear"));
}

TEST(TimeWindows, AWindowIsAStepOnlyWhenTheProgramUsedMemoryInIt) {
  Clock::time_point start{};
  TimeWindows windows(100ms, start);
  windows.endNextAt(start + 100ms);
  EXPECT_EQ(windows.untilEnd(start + 40ms), 60ms);
  EXPECT_EQ(windows.check(start + 99ms, 10), TimeWindows::Window::kRunning);
  EXPECT_EQ(windows.check(start + 100ms, 10), TimeWindows::Window::kStep);
  windows.next(start + 100ms);
  EXPECT_EQ(windows.untilEnd(start + 100ms), 100ms);
  // No allocation or free since the last window ended: no step, and the next window has begun.
  EXPECT_EQ(windows.check(start + 200ms, 10), TimeWindows::Window::kEmpty);
  EXPECT_EQ(windows.untilEnd(start + 200ms), 100ms);
  EXPECT_EQ(windows.check(start + 300ms, 11), TimeWindows::Window::kStep);
  EXPECT_EQ(windows.untilEnd(start + 400ms), 0ns);
}

TEST(TimeWindows, WindowsSizedToTheRunGrowWithIt) {
  Clock::time_point start{};
  TimeWindows windows(0ns, start);
  windows.next(start + 1s);
  EXPECT_EQ(windows.untilEnd(start + 1s), runSizedWindow(1s));
  EXPECT_EQ(runSizedWindow(1s), kShortestWindow);
  windows.next(start + 480s);
  EXPECT_EQ(windows.untilEnd(start + 480s), 10s);
}

DetectorOptions quietOptions() {
  DetectorOptions options;
  options.on_leak = ReportPolicy::kNone;
  options.warmup = 1;
  return options;
}

TEST(StepLedger, StepsCloserThanAStepCostsAreOneWhenAskedAndNoneAfterTheStop) {
  LeakDetector detector(quietOptions());
  int after_steps = 0;
  StepLedger ledger(detector, [&] { ++after_steps; });
  Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(ledger.mutex());
    EXPECT_FALSE(ledger.tooSoonLocked(now));  // the first step never is
    EXPECT_TRUE(ledger.takeLocked(now, true));
    // The smallest gap is kMinStepGap at least: a step a nanosecond later is one with the last,
    // unless the source says it is a step of its own (a change of phase).
    EXPECT_TRUE(ledger.tooSoonLocked(now + 1ns));
    EXPECT_FALSE(ledger.takeLocked(now + 1ns, true));
    EXPECT_TRUE(ledger.takeLocked(now + 1ns, false));
    EXPECT_FALSE(ledger.tooSoonLocked(now + 1ns + kMaxStepGap));
  }
  ledger.afterStep();
  EXPECT_EQ(after_steps, 1);
  EXPECT_GE(ledger.minGap(), kMinStepGap);
  EXPECT_LE(ledger.minGap(), kMaxStepGap);
  EXPECT_EQ(ledger.taken(), 2u);
  EXPECT_EQ(detector.report().steps, 2u);
  ledger.stop();  // a forked child
  {
    std::lock_guard<std::mutex> lock(ledger.mutex());
    EXPECT_FALSE(ledger.takeLocked(now + 1s, false));
  }
  EXPECT_EQ(ledger.taken(), 2u);
}

// The source the program's own steps take over from.
class GuessedSteps final : public StepSource {
 public:
  std::vector<memseal::report::StepsTaken> stepsTaken() override { return {}; }
  std::vector<std::pair<std::string, double>> iterationsPerStep() override { return {}; }
  void handOver() override { ++handed_over; }
  int handed_over = 0;
};

TEST(FrameworkSteps, TheFirstClockTakesOverOnceAndItsStepsGoToTheLedger) {
  LeakDetector detector(quietOptions());
  StepLedger ledger(detector, nullptr);
  GuessedSteps guessed;
  FrameworkSteps steps(ledger, guessed);
  EXPECT_TRUE(steps.stepsTaken().empty());  // no signal yet
  StepEvent sgd{StepSignal::kOptimizerStep, 1, "SGD"};
  steps.onEvent(sgd);  // an optimizer takes the clock at once, ending no step
  EXPECT_EQ(guessed.handed_over, 1);
  EXPECT_EQ(ledger.taken(), 0u);
  for (int i = 0; i < 5; ++i) steps.onEvent(sgd);
  EXPECT_EQ(guessed.handed_over, 1);
  // Each optimizer step ends one, unless it came closer to the last than a step costs.
  std::uint64_t taken = ledger.taken();
  EXPECT_GE(taken, 1u);
  EXPECT_LE(taken, 5u);
  std::vector<memseal::report::StepsTaken> clocks = steps.stepsTaken();
  ASSERT_EQ(clocks.size(), 1u);
  const auto* clock = std::get_if<memseal::report::ProgramClockSteps>(&clocks[0]);
  ASSERT_NE(clock, nullptr);
  EXPECT_EQ(clock->signal, memseal::report::ProgramClockSteps::Signal::kOptimizerStep);
  EXPECT_EQ(clock->object, "SGD");
  EXPECT_TRUE(clock->phase.empty());  // the run's only clock
  EXPECT_EQ(clock->steps, taken);
  EXPECT_EQ(detector.report().steps, taken);
  // A forked child's steps are not the parent's.
  ledger.stop();
  steps.onEvent(sgd);
  EXPECT_EQ(ledger.taken(), taken);
}

}  // namespace
}  // namespace memseal::inject
