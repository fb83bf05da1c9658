// Where a program that has no step() ends its steps, for `memseal run`:
//   auto      the op-loop finder (op_loop_finder.h) learns the loops of the program's outermost
//             ops, with no steps meanwhile (start-up would look like growth); once a loop is
//             found, a step ends at each call of the op that starts its iteration, and each loop
//             is a phase of the leak detector's steps (LeakDetector::phase). Once a loop's
//             iterations each make the same number of allocations, its steps are counted
//             (counted_loop_steps.h). When no loop is found, time windows sized to the run;
//   interval  time windows of a fixed length;
//   on:NAME   each outermost call of an ATen op ("aten::linear" or "linear"), a TorchScript
//             function ("forward") or a named region (RECORD_USER_SCOPE, torch.profiler's
//             record_function), or each MEMSEAL_REGION(NAME) entered in a program linked to
//             libmemseal.
// StepBoundary decides when a step ends and makes the finder's decisions (the detector's steps
// and phases, the op callback); what they mean is the detector's. The ops are seen through a
// global at::RecordFunction callback; the runtime's own thread calls tick() for windows and for
// the learning's time limit. A Python program's own steps take over from here (FrameworkSteps).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inject/counted_loop_steps.h"
#include "inject/op_loop_finder.h"
#include "inject/step_cost.h"
#include "inject/step_rule.h"
#include "memseal/leak_detector.h"

namespace memseal::inject {

// Whether an op or function named `name` is what the user named: the whole name, or the part after
// its namespace ("linear" for "aten::linear", "forward" for "__torch__.Model.forward").
bool stepNameMatches(const char* name, const std::string& wanted);

class StepBoundary : private CountedLoopSteps::Host {
 public:
  // `after_step` runs after each step, on the thread that ended it, outside the step lock.
  StepBoundary(StepRule rule, LeakDetector& detector, std::function<void()> after_step);
  ~StepBoundary();
  StepBoundary(const StepBoundary&) = delete;
  StepBoundary& operator=(const StepBoundary&) = delete;

  // Called by the RecordFunction callback for every op of every thread; only outermost ops count
  // (nested ones vary between iterations in Python: the order of profiler bookkeeping ops).
  void onOp(const char* name, bool outermost);
  // A MEMSEAL_REGION entered, in a program linked to libmemseal (--step-on NAME only).
  void onNamedScope(const char* name);
  // How long the runtime's thread may sleep before tick() has work.
  std::chrono::nanoseconds untilNextTick() const;
  void tick();
  // Held while a step is taken; the runtime takes it around fork() and for reports.
  std::mutex& stepMutex() { return step_mutex_; }
  // No more steps (a forked child: the parent's steps are not its own).
  void stopSteps() { phase_.store(Phase::kStopped); }
  // Another source ends the steps from now on (a Python program's own signals: FrameworkSteps):
  // no more steps here, the op callback removed, counting stopped, and every step's ops watched
  // (unless the user chose which). What was found before stays in description().
  void handOver();
  std::uint64_t stepsTaken() {
    std::lock_guard<std::mutex> lock(step_mutex_);
    return steps_taken_;
  }
  // While steps are counted, the detector watches ops automatically (CountedLoopSteps).
  void watchOpsAutomaticallyWhileCounting() { counted_.watchOpsAutomaticallyWhileCounting(); }
  // The allocator hook's handler (track::CountedStepHandler).
  std::uint64_t onCountedBoundary() { return counted_.onBoundary(); }
  // Which boundary was used, in words, for the report's notes (one line per loop found).
  std::vector<std::string> description();
  // Each loop's phase name and its iterations per step, where steps took several iterations.
  std::vector<std::pair<std::string, double>> iterationsPerStep();

 private:
  // kSwitching: a thread decided a change of phase and makes it (applyPhaseChange); other threads'
  // ops are not looked at meanwhile.
  enum class Phase : std::uint8_t { kLearning, kOps, kWindows, kSwitching, kStopped };
  using Clock = std::chrono::steady_clock;

  // Makes the finder's decision change_ once learn_mutex_ is released (the GIL, then the step
  // lock, as every step is taken).
  void applyPhaseChange(bool on_runtime_thread);

  // With learn_mutex_ held: keeps the finder's decision for applyPhaseChange (the phase is
  // kSwitching until then); whether there was one.
  bool decided(std::optional<OpLoopFinder::Decision> decision);
  // While a loop is followed: the finder checks the op (of the loop's thread only); whether it
  // decided that the loop ended.
  bool checkLoopStillRepeats(const char* name);
  void takeStep();
  // The step itself, under the step lock; false when it was not taken. `iterations`: the loop's
  // iterations it ends (a counted step ends several).
  bool stepLocked(Clock::time_point now, bool coalesce, Phase expected,
                  std::uint64_t iterations = 1);

  void setCallbackInstalled(bool installed);

  // CountedLoopSteps::Host.
  bool takeCountedStep(Clock::time_point now, std::uint64_t iterations) override;
  void afterCountedStep() override;
  bool followingLoop() const override;
  bool loopSettled() override;
  void judgeLoopAfresh() override;
  void setOpCallbackInstalled(bool installed) override { setCallbackInstalled(installed); }
  Clock::duration minStepGap() override;
  void watchOps(OpWatching watching) override;

  StepRule rule_;
  LeakDetector& detector_;
  std::uint64_t callback_ = 0;  // the RecordFunction callback's handle, 0: none
  std::mutex callback_mutex_;   // guards callback_ (installed and removed on the loop's thread)
  std::function<void()> after_step_;
  std::atomic<Phase> phase_{Phase::kLearning};
  std::mutex step_mutex_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_step_{};
  StepCost step_cost_;  // and so how close together steps may come
  std::atomic<Clock::time_point> next_window_{Clock::time_point{}};
  // memoryActivity() when the last window was judged: a window without any is no step.
  std::atomic<std::int64_t> window_activity_{-1};
  // Under step_mutex_ (steps_seen_ is steps_taken_ for readers without it).
  std::uint64_t steps_taken_ = 0;
  bool handed_over_ = false;
  std::atomic<std::uint64_t> steps_seen_{0};
  std::uint64_t steps_outside_loops_ = 0;
  std::vector<std::uint64_t> loop_steps_;  // steps taken in each loop
  // Iterations of each loop (calls of its anchor), steps or not: iterations closer together than a
  // step costs are taken as one step (step_cost_).
  std::vector<std::uint64_t> loop_iterations_;
  // The loop of kOps, written while the phase is kSwitching (by the one thread that switches) and
  // read after kOps is seen; the thread it runs on, where its steps are taken.
  std::size_t current_ = 0;
  std::atomic<std::uint64_t> loop_thread_{0};

  // The op-loop finder (auto only), under learn_mutex_, and the decision it made last.
  std::mutex learn_mutex_;
  OpLoopFinder finder_;
  OpLoopFinder::Decision change_;
  std::size_t loops_size_ = 0;  // the finder's loops, for applyPhaseChange (no learn lock)
  std::string anchor_;          // the op a step ends at (kOps); read without learn_mutex_
  std::mutex anchor_mutex_;     // guards anchor_ against a decision on another thread

  CountedLoopSteps counted_{*this};
};

}  // namespace memseal::inject
