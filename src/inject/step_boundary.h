// Where a program that has no step() ends its steps, for `memseal run`:
//   auto      the loop is learned from the outermost ops the program runs
//   (analyze/repeating_ops.h), with
//             no steps meanwhile (start-up would look like growth); once they are seen to repeat
//             exactly, a step ends at each call of the op that runs once per iteration; when they
//             do not (kLastCheckpoint ops or kMaxLearning), time windows sized to the run;
//   interval  time windows of a fixed length;
//   on:NAME   each outermost call of an ATen op ("aten::linear" or "linear"), a TorchScript
//             function ("forward") or a named region (RECORD_USER_SCOPE, torch.profiler's
//             record_function), or each MEMSEAL_SCOPE(NAME) entered in a program linked to
//             libmemseal.
// The ops are seen through a global at::RecordFunction callback; the runtime's own thread calls
// tick() for windows and for the learning's time limit.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::inject {

struct StepRule {
  enum class Kind { kAuto, kInterval, kOn };
  Kind kind = Kind::kAuto;
  std::chrono::nanoseconds interval{0};
  std::string name;
};

// Time windows sized to the run, for steps (StepBoundary) and forked children (ForkChildWatch):
// the first ones short, so that a run of a few seconds still gets dozens of them; later ones a
// 48th of the time since the start, so that a long run has few and each outlasts an iteration.
constexpr std::chrono::milliseconds kShortestWindow{50};
constexpr int kWindowsPerRun = 48;
inline std::chrono::nanoseconds runSizedWindow(std::chrono::nanoseconds since_start) {
  return std::max<std::chrono::nanoseconds>(kShortestWindow, since_start / kWindowsPerRun);
}

// "auto", "interval:NANOSECONDS" or "on:NAME" (what the launcher writes in MEMSEAL_RUN_STEP).
bool parseStepRule(const std::string& text, StepRule* rule, std::string* error);
std::string stepRuleText(const StepRule& rule);

// Whether an op or function named `name` is what the user named: the whole name, or the part after
// its namespace ("linear" for "aten::linear", "forward" for "__torch__.Model.forward").
bool stepNameMatches(const char* name, const std::string& wanted);

class StepBoundary {
 public:
  // `after_step` runs after each step, on the thread that ended it, outside the step lock.
  StepBoundary(StepRule rule, LeakDetector& detector, std::function<void()> after_step);
  ~StepBoundary();
  StepBoundary(const StepBoundary&) = delete;
  StepBoundary& operator=(const StepBoundary&) = delete;

  // Called by the RecordFunction callback for every op of every thread; only outermost ops count
  // (nested ones vary between iterations in Python: the order of profiler bookkeeping ops).
  void onOp(const char* name, bool outermost);
  // A MEMSEAL_SCOPE entered, in a program linked to libmemseal (--step-on NAME only).
  void onNamedScope(const char* name);
  // How long the runtime's thread may sleep before tick() has work.
  std::chrono::nanoseconds untilNextTick() const;
  void tick();
  // Held while a step is taken; the runtime takes it around fork() and for reports.
  std::mutex& stepMutex() { return step_mutex_; }
  // No more steps (a forked child: the parent's steps are not its own).
  void stopSteps() { phase_.store(Phase::kStopped); }
  std::uint64_t stepsTaken() {
    std::lock_guard<std::mutex> lock(step_mutex_);
    return steps_taken_;
  }
  // Which boundary was used, in words, for the report's notes.
  std::string description() const;

 private:
  enum class Phase : std::uint8_t { kLearning, kOps, kWindows, kStopped };
  using Clock = std::chrono::steady_clock;

  void learn(const char* name);
  std::uint32_t opId(const char* name);
  void decideFromCheckpoint(const std::vector<std::uint32_t>& ops, std::uint64_t thread,
                            bool time_is_up);
  void checkLoopStillRepeats(const char* name);
  void startWindows(std::string reason);
  void takeStep();
  // The step itself, under the step lock; false when it was not taken.
  bool stepLocked(Clock::time_point now, bool coalesce);

  StepRule rule_;
  LeakDetector& detector_;
  std::uint64_t callback_ = 0;  // the RecordFunction callback's handle, 0: none
  std::function<void()> after_step_;
  std::atomic<Phase> phase_{Phase::kLearning};
  std::mutex step_mutex_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_step_{};
  Clock::time_point next_window_{};
  std::uint64_t steps_taken_ = 0;

  // Learning (auto only), under learn_mutex_.
  std::mutex learn_mutex_;
  std::deque<std::string> op_names_;  // a deque: its strings never move (op_ids_ views them)
  std::unordered_map<std::string_view, std::uint32_t> op_ids_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> ops_by_thread_;
  Clock::time_point first_op_{};
  std::size_t ops_seen_ = 0;
  std::size_t last_period_ = 0;  // the period found at the previous checkpoint, 0: none
  // After the decision: the learned thread's ops expected next (ring_[i % period]).
  std::vector<std::uint32_t> ring_;
  std::size_t ring_position_ = 0;
  std::uint64_t anchor_thread_ = 0;
  std::size_t mismatches_ = 0;   // in the current block of 4 periods
  std::uint32_t relearned_ = 0;  // decisions taken back because the ops stopped repeating
  std::string anchor_;           // the op a step ends at (kOps)
  std::string decision_;         // why this boundary, in words
};

}  // namespace memseal::inject
