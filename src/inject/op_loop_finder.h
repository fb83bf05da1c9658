// The op-loop finder, the fallback step source of `memseal run` for a program that gives no step
// of its own (a C++ program; a Python program before its first optimizer step, batch or model
// call): loops are learned from the outermost ops each thread runs (analyze/repeating_ops.h), and
// the loop followed iteration by iteration until it ends, when the next one is learned or one seen
// before is recognised. Each loop is a phase of the leak detector's steps. Where no loop is found,
// it decides for time windows.
//
// Pure: it sees op names, thread numbers, live bytes and times, and returns decisions
// (OpLoopFinder::Decision) that OpLoopSteps makes: the steps, the detector's phases, the op
// callback. It takes no lock (OpLoopSteps calls it under its learning lock) and knows no torch.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyze/repeating_ops.h"
#include "inject/followed_iterations.h"
#include "inject/inner_loops.h"
#include "inject/op_catalog.h"
#include "report/steps_taken.h"

namespace memseal::inject {

class OpLoopFinder {
 public:
  using Clock = std::chrono::steady_clock;

  // How long learning may go on before it gives up for time windows: `max_learning` once
  // kMinOpsBeforeTimeLimit ops were seen, `max_learning_with_few_ops` in any case.
  struct TimeLimits {
    Clock::duration max_learning;
    Clock::duration max_learning_with_few_ops;
  };

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
    // Whether its iteration runs backward; the backward ops seen when it was last left, and its
    // runs in a row with backward run between them (see recogniseKnownLoop).
    bool runs_backward = false;
    std::uint64_t backward_at_leave = 0;
    int runs_around_backward = 0;
    // Recognising it again while learning: the ops since its anchor's last call.
    std::uint64_t pending_hash = 0;
    std::size_t pending_length = 0;
    bool pending_started = false;
    int matched_in_a_row = 0;
  };

  // A change of what ends the steps, for the caller to make.
  struct Decision {
    enum class Next : std::uint8_t { kLearning, kFollowLoop, kWindows };
    Next next = Next::kLearning;
    std::string detector_phase;     // the detector's phase from now on; empty: unchanged
    bool end_step = false;          // end the step that runs now
    bool phase_first = false;       // ... once it is the new phase's (else in the phase it ran in)
    std::size_t loop = 0;           // kFollowLoop: the loop it enters
    std::uint64_t loop_thread = 0;  // ... and the thread it runs on
    // Steps already taken that belong to the new phase (a loop's last iterations that no longer
    // matched it: the next phase had begun).
    std::uint64_t steps_back = 0;
    // kWindows with no loop found: no op will matter again, the op callback can go.
    bool ops_needed = true;
  };

  // What one op of the followed loop's thread changed.
  struct LoopCheck {
    std::optional<Decision> decision;  // the loop ended
    bool anchor_moved = false;  // judged again on more iterations: another op starts each one
  };

  explicit OpLoopFinder(TimeLimits limits);

  // While learning: one outermost op of `thread`, begun with `live_bytes` of tensor memory live.
  std::optional<Decision> learn(const char* name, std::uint64_t thread, std::int64_t live_bytes,
                                Clock::time_point now);
  // While learning: gives up for time windows once learning has lasted too long (then from the
  // busiest thread's ops, which may still show a loop).
  std::optional<Decision> decideIfTimeIsUp(Clock::time_point now);
  // In time windows: whether this op, with the ones before it, runs a loop found before again.
  std::optional<Decision> recogniseInWindows(const char* name, std::uint64_t thread);
  // While a loop is followed: one outermost op of any thread (only the loop's own count), with
  // `steps_taken` the steps so far.
  LoopCheck checkLoopStillRepeats(const char* name, std::uint64_t thread,
                                  std::uint64_t steps_taken);
  // Whether the followed loop's recent iterations all matched its ops, and its decision was
  // judged again and settled: then its steps may be counted instead of followed op by op.
  bool settled() const;
  // The followed loop is judged afresh from its anchor's next call (its ops were not followed
  // for a while).
  void judgeAfresh();

  // The followed loop's anchor, the op a step ends at.
  const std::string& anchorName() const { return ops_.name(loops_[current_].anchor); }
  const std::vector<Loop>& loops() const { return loops_; }
  const std::string& opName(std::uint32_t id) const { return ops_.name(id); }
  std::size_t opsSeen() const { return ops_seen_; }
  // Why time windows were taken (kNotTaken while they never were), and the ops seen on the
  // busiest thread then.
  report::OpLoopStepsTaken::WindowsBecause windowsBecause() const { return windows_because_; }
  std::size_t opsWhenWindowsBegan() const { return ops_when_windows_began_; }

 private:
  void resetLearning();
  // A checkpoint of `thread`'s ops.
  std::optional<Decision> decideFromCheckpoint(std::uint64_t thread, bool time_is_up);
  // Where `thread`'s ops show no loop: units of them run back to back a varying number of times
  // are loops inside a longer iteration (analyze::opsRepeatedAVaryingNumberOfTimes), and every
  // thread's ops so far are seen again with each run of them as one op. Whether there were any.
  bool markLoopsOfVaryingLength(std::uint64_t thread);
  // Whether op `id` on `thread` completes two iterations in a row of a loop found before (it then
  // runs again).
  std::optional<Decision> recogniseKnownLoop(std::uint32_t id, std::uint64_t thread);
  // Its ops never start an iteration again, and each run of them is one op: from the next op on,
  // and in every thread's ops stored so far (collapseStoredOps).
  void markInner(Loop& loop);
  // Every thread's ops stored so far, seen again with each run of the inner loops' ops as one op.
  void collapseStoredOps();
  // A loop without backward run again, or interrupted, with backward run on its thread since
  // `backward_before` was counted: once kInnerLoopRuns times in a row, it lies inside the
  // training iteration that runs it (a data loader's loop over the samples of each batch).
  bool insideABackwardIteration(Loop& loop, std::uint64_t backward_before);
  // The steps are to follow loop `index` (new or found before).
  Decision enterLoop(std::size_t index);
  // The followed loop's iterations stopped matching: learn the next one.
  Decision leaveLoop(std::uint64_t steps_taken);
  std::optional<Decision> startWindows(report::OpLoopStepsTaken::WindowsBecause because,
                                       std::size_t ops);

  TimeLimits limits_;
  OpCatalog ops_;
  // Learning: each thread's ops, and the tracked tensor memory live as each began.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> ops_by_thread_;
  std::unordered_map<std::uint64_t, std::vector<std::int64_t>> live_by_thread_;
  Clock::time_point first_op_{};
  std::size_t ops_seen_ = 0;
  std::size_t next_checkpoint_ = 0;
  // Loops found at recent checkpoints (period, content), kept across learnings: a short phase (a
  // validation pass of twenty batches) is found when it runs again.
  std::deque<std::pair<std::size_t, std::uint64_t>> candidates_;
  std::vector<Loop> loops_;
  std::size_t current_ = 0;      // the loop followed
  FollowedIterations followed_;  // the loop followed, checked on its thread
  // After a decision, its thread's ops are kept a while longer and judged again: a deep model's
  // layers can look like the loop until a few iterations have run.
  std::vector<std::uint32_t> verify_ops_;
  std::size_t verify_until_ = 0;
  std::size_t verify_period_ = 0;
  std::size_t iterations_this_run_ = 0;  // of the loop entered now
  InnerLoops inner_;
  std::size_t last_left_loop_ = std::numeric_limits<std::size_t>::max();
  report::OpLoopStepsTaken::WindowsBecause windows_because_ =
      report::OpLoopStepsTaken::WindowsBecause::kNotTaken;
  std::size_t ops_when_windows_began_ = 0;
};

}  // namespace memseal::inject
