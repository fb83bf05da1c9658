// Where a program that has no step() ends its steps, for `memseal run`:
//   auto      loops are learned from the outermost ops the program runs (analyze/repeating_ops.h),
//             with no steps meanwhile (start-up would look like growth); once a loop is found, a
//             step ends at each call of the op that starts its iteration. A program runs several
//             loops in turn (training, then validation, then training again): when a loop's
//             iterations stop matching, it has ended; the next loop is learned, or recognised as
//             one seen before, and each loop is a phase of the leak detector's steps
//             (LeakDetector::phase). When no loop is found (kLastCheckpoint ops or kMaxLearning),
//             time windows sized to the run;
//   interval  time windows of a fixed length;
//   on:NAME   each outermost call of an ATen op ("aten::linear" or "linear"), a TorchScript
//             function ("forward") or a named region (RECORD_USER_SCOPE, torch.profiler's
//             record_function), or each MEMSEAL_REGION(NAME) entered in a program linked to
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
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analyze/repeating_ops.h"
#include "inject/step_cost.h"
#include "inject/step_rule.h"
#include "memseal/leak_detector.h"

namespace memseal::inject {

// Time windows sized to the run, for steps (StepBoundary) and forked children (ForkChildWatch):
// the first ones short, so that a run of a few seconds still gets dozens of them; later ones a
// 48th of the time since the start, so that a long run has few and each outlasts an iteration.
constexpr std::chrono::milliseconds kShortestWindow{50};
constexpr int kWindowsPerRun = 48;
inline std::chrono::nanoseconds runSizedWindow(std::chrono::nanoseconds since_start) {
  return std::max<std::chrono::nanoseconds>(kShortestWindow, since_start / kWindowsPerRun);
}

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
  // While steps are counted (whole iterations each), the detector watches ops automatically (one
  // step in a few, the others replayed) instead of on every step, and again on every step when
  // counting stops. For a runtime whose user did not choose which steps' ops are watched.
  void watchOpsAutomaticallyWhileCounting() { ops_follow_counting_.store(true); }
  // Which boundary was used, in words, for the report's notes (one line per loop found).
  std::vector<std::string> description();
  // Each loop's phase name and its iterations per step, where steps took several iterations.
  std::vector<std::pair<std::string, double>> iterationsPerStep();

 private:
  // kSwitching: a thread decided a change of phase and makes it (applyPhaseChange); other threads'
  // ops are not looked at meanwhile.
  enum class Phase : std::uint8_t { kLearning, kOps, kWindows, kSwitching, kStopped };
  using Clock = std::chrono::steady_clock;

  // A loop found in the program's ops: one phase of its steps.
  struct Loop {
    std::string name;  // the detector's phase: "loop 1 (aten::embedding)"
    std::uint32_t anchor = 0;
    std::size_t period = 0;
    std::uint64_t signature = 0;     // of its usual iteration (analyze::foldOp)
    std::uint64_t thread = 0;        // the thread it runs on
    std::size_t found_after = 0;     // ops seen when it was found
    std::vector<std::uint32_t> ops;  // of one usual iteration, as found
    std::uint32_t runs = 0;
    int short_runs_in_a_row = 0;  // runs of few iterations, with no other loop between them
    bool inner = false;           // inside a longer iteration: never a step again
    // Recognising it again while learning: the ops since its anchor's last call.
    std::uint64_t pending_hash = 0;
    std::size_t pending_length = 0;
    bool pending_started = false;
    int matched_in_a_row = 0;
  };

  // A change of phase, decided under learn_mutex_ and made by the same thread once it has released
  // it (applyPhaseChange: the GIL, then the step lock, as every step is taken).
  struct PhaseChange {
    Phase next = Phase::kLearning;
    std::string detector_phase;     // the detector's phase from now on; empty: unchanged
    bool end_step = false;          // end the step that runs now
    bool phase_first = false;       // ... once it is the new phase's (else in the phase it ran in)
    std::size_t loop = 0;           // next == kOps: the loop it enters
    std::uint64_t loop_thread = 0;  // ... and the thread it runs on
    // Steps already taken that belong to the new phase (a loop's last iterations that no longer
    // matched it: the next phase had begun).
    std::uint64_t steps_back = 0;
  };
  void applyPhaseChange(bool on_runtime_thread);

  // These return whether they decided a change of phase (to apply once learn_mutex_ is released).
  bool learn(const char* name);
  std::uint32_t opId(const char* name);
  // With learn_mutex_ held: a checkpoint of `thread`'s ops.
  bool decideFromCheckpoint(const std::vector<std::uint32_t>& ops, std::uint64_t thread,
                            bool time_is_up);
  // With learn_mutex_ held: whether op `id` on this thread completes two iterations in a row of a
  // loop found before (it then runs again).
  bool recogniseKnownLoop(std::uint32_t id);
  // Moves the loop's anchor to the op of its iteration where the least tensor memory is live.
  static void startAtLeastLiveMemory(analyze::LoopShape& loop,
                                     const std::vector<std::uint32_t>& ops,
                                     const std::vector<std::int64_t>& live);
  // With learn_mutex_ held: the steps are to follow loop `index` (new or found before).
  void enterLoop(std::size_t index);
  bool checkLoopStillRepeats(const char* name);
  // With learn_mutex_ held: the current loop's iterations stopped matching: learn the next one.
  void leaveLoop();
  bool startWindows(std::string reason);
  void resetLearning();
  void takeStep();
  // The step itself, under the step lock; false when it was not taken. `iterations`: the loop's
  // iterations it ends (a counted step ends several).
  bool stepLocked(Clock::time_point now, bool coalesce, Phase expected,
                  std::uint64_t iterations = 1);

  // Counted steps (step_boundary_counted.cpp), on the loop's thread but for the quiet stop. Once
  // the loop's last kEqualIterationsToCount iterations each made the same number of allocations,
  // the op callback is removed and the allocator hook ends the steps (track/counted_steps.h);
  // each step checks that it begins where the first did, and every kCountedStepsBetweenChecks
  // steps the callback comes back until two calls of the anchor fall on iteration boundaries. A
  // check that fails (the iterations no longer allocate alike, or the anchor no longer runs: the
  // loop ended), or a loop thread quiet for kQuietLoop, stops counting, and the ops are followed
  // again.
  // At the anchor, with the callback on: whether counting may start now.
  bool countIterationAllocations(Clock::time_point now);
  void startCounting(Clock::time_point now);
  // At the anchor while counting (the callback is on only during a check).
  void checkCountedAnchor();
  void stopCounting(const char* why);
  // On the runtime's thread: the loop's thread made no allocation for a while (it waits, or a
  // next phase makes none on the CPU): the ops are followed again, so that a loop ending there is
  // seen.
  void stopCountingWhenQuiet();
  // After counting stopped (either way): the loop judged afresh, ops watched on every step.
  void followOpsAgain(const char* why);
  void takeCountedStep(Clock::time_point now);
  // Notes a counted step taken (or counting begun) at `now`, for the quiet stop.
  void markCountedStep(Clock::time_point now);
  void setCallbackInstalled(bool installed);
  std::uint64_t iterationsPerCountedStep(Clock::duration iteration);

 public:
  // The allocator hook's handler (track::CountedStepHandler): ends a counted step and returns the
  // allocations until the next one (0: counting stopped).
  std::uint64_t onCountedBoundary();

 private:
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

  // Learning (auto only), under learn_mutex_.
  std::mutex learn_mutex_;
  std::deque<std::string> op_names_;  // a deque: its strings never move (op_ids_ views them)
  std::unordered_map<std::string_view, std::uint32_t> op_ids_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> ops_by_thread_;
  // Tracked tensor memory live as each of those ops began.
  std::unordered_map<std::uint64_t, std::vector<std::int64_t>> live_by_thread_;
  Clock::time_point first_op_{};
  std::size_t ops_seen_ = 0;
  std::size_t next_checkpoint_ = 0;
  // Loops found at recent checkpoints (period, content), kept across learnings: a short phase (a
  // validation pass of twenty batches) is found when it runs again.
  std::deque<std::pair<std::size_t, std::uint64_t>> candidates_;
  std::vector<Loop> loops_;
  PhaseChange change_;
  std::size_t loops_size_ = 0;  // loops_.size() for applyPhaseChange, which holds no learn lock
  // The current loop, checked on its thread: the ops since its anchor's last call, whether each of
  // the last iterations matched (bits, newest lowest), and how many were judged.
  std::uint64_t segment_hash_ = 0;
  std::size_t segment_length_ = 0;
  bool segment_started_ = false;
  std::uint32_t recent_matches_ = 0;
  std::uint32_t recent_judged_ = 0;
  // Steps taken when the current run of iterations that did not match began (see steps_back).
  std::uint64_t steps_at_mismatch_ = 0;
  bool mismatching_ = false;
  std::size_t ops_since_anchor_ = 0;
  // After a decision, its thread's ops are kept a while longer and judged again: a deep model's
  // layers can look like the loop until a few iterations have run.
  std::vector<std::uint32_t> verify_ops_;
  std::size_t verify_until_ = 0;
  std::size_t verify_period_ = 0;
  std::uint32_t relearned_ = 0;                // loops that ended and were followed by learning
  std::size_t iterations_this_run_ = 0;        // of the loop entered now
  std::vector<std::uint32_t> inner_loop_ops_;  // never the anchor of a loop found from now on
  std::size_t last_left_loop_ = std::numeric_limits<std::size_t>::max();
  std::string anchor_;       // the op a step ends at (kOps); read without learn_mutex_
  std::mutex anchor_mutex_;  // guards anchor_ against a decision on another thread
  std::string decision_;     // why time windows, in words

  // Counted steps. Written on the loop's thread only, except counting_ and the totals.
  struct IterationAllocations {
    bool seen = false;
    std::uint64_t last_serial = 0;    // the thread's allocation serial at the anchor's last call
    Clock::time_point last_anchor{};  // ... and when
    std::uint64_t allocations = 0;    // of the iterations in the current run of equal ones
    std::uint32_t equal = 0;          // iterations in that run
    Clock::time_point run_started{};  // when its first iteration began
  };
  IterationAllocations iteration_;
  std::atomic<bool> counting_{false};
  std::atomic<bool> ops_follow_counting_{false};
  std::uint64_t allocations_per_iteration_ = 0;
  std::uint64_t iterations_per_step_ = 1;
  std::uint64_t count_base_ = 0;  // an allocation serial at which an iteration began
  // Where the first counted step began (whereThisThreadIs), for each set of RecordFunction
  // callbacks (memseal's own, and whether there are any).
  std::uint64_t iteration_start_[8] = {};
  // track::recordFunctionCallbacks() when the last counted boundary was done with.
  std::uint64_t callbacks_seen_ = 0;
  Clock::time_point next_place_check_{};
  Clock::duration place_cost_{};  // of whereThisThreadIs, a moving average
  // When the last counted step was taken, and how far apart they come (read by the runtime's
  // thread too).
  std::atomic<Clock::rep> last_counted_step_at_{0};
  std::atomic<Clock::duration> counted_step_interval_{Clock::duration::zero()};
  Clock::duration counted_iteration_time_{};
  bool checking_ = false;
  std::uint32_t steps_since_check_ = 0;
  std::uint32_t boundaries_while_checking_ = 0;
  std::uint32_t checked_anchors_ = 0;
  std::atomic<std::uint64_t> counted_steps_{0};        // for the description
  std::atomic<std::uint64_t> counted_allocations_{0};  // per iteration, the last counting's
};

}  // namespace memseal::inject
