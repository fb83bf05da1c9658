#include "inject/op_loop_finder.h"

#include <algorithm>

#include "inject/loop_anchor.h"
#include "inject/step_tuning.h"

namespace memseal::inject {

OpLoopFinder::OpLoopFinder(TimeLimits limits) : limits_(limits) { resetLearning(); }

void OpLoopFinder::resetLearning() {
  ops_by_thread_.clear();
  live_by_thread_.clear();
  ops_seen_ = 0;
  next_checkpoint_ = kFirstCheckpoint;
  for (Loop& loop : loops_) {
    loop.pending_started = false;
    loop.matched_in_a_row = 0;
  }
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::learn(const char* name, std::uint64_t thread,
                                                          std::int64_t live_bytes,
                                                          Clock::time_point now) {
  if (ops_seen_++ == 0) first_op_ = now;
  std::uint32_t id = ops_.id(name);
  ops_.noteOp(id, thread);
  if (!inner_.collapse(id, thread)) return std::nullopt;
  std::size_t inner_ops = inner_.size();
  if (std::optional<Decision> recognised = recogniseKnownLoop(id, thread)) return recognised;
  // A loop just found to lie inside a longer iteration may have this op: seen as its run.
  if (inner_.size() != inner_ops && !inner_.collapse(id, thread)) return std::nullopt;
  std::vector<std::uint32_t>& ops = ops_by_thread_[thread];
  ops.push_back(id);
  live_by_thread_[thread].push_back(live_bytes);
  std::size_t size = ops.size();
  if (size < kFirstCheckpoint || size < next_checkpoint_) return std::nullopt;
  // Each half again as many, so a short phase (twenty iterations of a validation pass) is still
  // judged before it ends.
  next_checkpoint_ = size + size / 2;
  return decideFromCheckpoint(thread, size >= kLastCheckpoint);
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::decideIfTimeIsUp(Clock::time_point now) {
  Clock::duration learning = now - first_op_;
  if (ops_seen_ == 0 || learning < limits_.max_learning ||
      (ops_seen_ < kMinOpsBeforeTimeLimit && learning < limits_.max_learning_with_few_ops)) {
    return std::nullopt;
  }
  const std::vector<std::uint32_t>* busiest = nullptr;
  std::uint64_t busiest_thread = 0;
  for (const auto& [thread, ops] : ops_by_thread_) {
    if (busiest == nullptr || ops.size() > busiest->size()) {
      busiest = &ops;
      busiest_thread = thread;
    }
  }
  if (busiest == nullptr) return std::nullopt;
  return decideFromCheckpoint(busiest_thread, true);
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::recogniseInWindows(const char* name,
                                                                       std::uint64_t thread) {
  if (loops_.empty()) return std::nullopt;
  std::uint32_t id = ops_.id(name);
  ops_.noteOp(id, thread);
  if (!inner_.collapse(id, thread)) return std::nullopt;
  return recogniseKnownLoop(id, thread);
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::recogniseKnownLoop(std::uint32_t id,
                                                                       std::uint64_t thread) {
  for (std::size_t index = 0; index < loops_.size(); ++index) {
    Loop& loop = loops_[index];
    if (loop.thread != thread || loop.inner) continue;
    if (id == loop.anchor) {
      bool matched = loop.pending_started && loop.pending_length == loop.period &&
                     loop.pending_hash == loop.signature;
      loop.matched_in_a_row = matched ? loop.matched_in_a_row + 1 : 0;
      loop.pending_started = true;
      loop.pending_hash = analyze::foldOp(analyze::kEmptyOpsHash, id);
      loop.pending_length = 1;
      if (loop.matched_in_a_row < kRecognisedAfter) continue;
      if (insideABackwardIteration(loop, loop.backward_at_leave)) return std::nullopt;
      return enterLoop(index);
    }
    if (!loop.pending_started) continue;
    loop.pending_hash = analyze::foldOp(loop.pending_hash, id);
    // Past the iteration's length it cannot match: wait for the anchor.
    if (++loop.pending_length > loop.period) loop.pending_started = false;
  }
  return std::nullopt;
}

bool OpLoopFinder::markLoopsOfVaryingLength(std::uint64_t thread) {
  std::vector<std::uint32_t> varying = analyze::opsRepeatedAVaryingNumberOfTimes(
      ops_by_thread_[thread], kMaxInnerLoopPeriod, kInnerLoopMinRepeats, kInnerLoopMinLengths);
  bool added = false;
  for (std::uint32_t op : varying) {
    if (!inner_.mayStartIteration(op)) continue;
    inner_.add(op);
    added = true;
  }
  if (!added) return false;
  inner_.add(kInnerLoopRun);
  trace("ops repeated a varying number of times: " + std::to_string(varying.size()) +
        " ops of loops inside a longer iteration");
  collapseStoredOps();
  return true;
}

void OpLoopFinder::collapseStoredOps() {
  for (auto& [each, ops] : ops_by_thread_) {
    std::vector<std::int64_t>& live = live_by_thread_[each];
    std::size_t kept = 0;
    inner_.forgetRunOn(each);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::uint32_t id = ops[i];
      if (!inner_.collapse(id, each)) continue;
      ops[kept] = id;
      if (i < live.size()) live[kept] = live[i];
      ++kept;
    }
    ops.resize(kept);
    if (live.size() > kept) live.resize(kept);
  }
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::decideFromCheckpoint(std::uint64_t thread,
                                                                         bool time_is_up) {
  const std::vector<std::uint32_t>& ops = ops_by_thread_[thread];
  std::optional<analyze::LoopShape> found = analyze::findLoop(ops, kMinRepeats, inner_.ops());
  if (!found && markLoopsOfVaryingLength(thread)) {
    found = analyze::findLoop(ops, kMinRepeats, inner_.ops());
  }
  bool agreed =
      found && std::any_of(candidates_.begin(), candidates_.end(),
                           [&](const std::pair<std::size_t, std::uint64_t>& seen) {
                             return seen.first == found->period && seen.second == found->content;
                           });
  bool sure = found && found->repeats >= 2 * kMinRepeats && found->coverage >= kSureCoverage;
  if (tracing()) {
    trace("checkpoint at " + std::to_string(ops.size()) + " ops: " +
          (found ? "loop of " + std::to_string(found->period) + " ops at " +
                       ops_.name(found->anchor) + ", " + std::to_string(found->repeats) +
                       " iterations, coverage " + std::to_string(found->coverage) +
                       (agreed ? ", agreed" : "") + (sure ? ", sure" : "")
                 : std::string("no loop")));
  }
  if (found && !agreed) {
    candidates_.emplace_back(found->period, found->content);
    if (candidates_.size() > kRememberedCandidates) candidates_.pop_front();
  }
  if (agreed || sure) {
    Loop loop;
    startAtLeastLiveMemory(*found, ops, live_by_thread_[thread], inner_);
    loop.anchor = found->anchor;
    loop.period = found->period;
    loop.signature = found->signature;
    loop.ops = usualIterationOps(ops, found->anchor, found->period);
    loop.runs_backward = std::any_of(loop.ops.begin(), loop.ops.end(),
                                     [&](std::uint32_t op) { return ops_.isBackward(op); });
    loop.thread = thread;
    loop.found_after = ops.size();
    loop.name = "loop " + std::to_string(loops_.size() + 1) + " (" + ops_.name(found->anchor) + ")";
    loops_.push_back(std::move(loop));
    verify_ops_ = ops;
    verify_until_ = std::min(kLastCheckpoint, 8 * ops.size());
    verify_period_ = 0;
    candidates_.clear();
    return enterLoop(loops_.size() - 1);
  }
  if (!time_is_up) return std::nullopt;
  using WindowsBecause = report::OpLoopStepsTaken::WindowsBecause;
  return startWindows(
      found ? WindowsBecause::kLoopChangedBetweenChecks : WindowsBecause::kOpsNeverRepeated,
      ops.size());
}

OpLoopFinder::Decision OpLoopFinder::enterLoop(std::size_t index) {
  Loop& loop = loops_[index];
  loop.runs += 1;
  current_ = index;
  iterations_this_run_ = 0;
  loop.pending_started = false;
  loop.matched_in_a_row = 0;
  followed_.reset();
  ops_by_thread_.clear();
  // What ran since the last step (learning, after another loop ended) is a step outside loops;
  // the program's very first one (start-up) becomes part of the loop's first step.
  trace("enter " + loop.name + " (period " + std::to_string(loop.period) + ", anchor " +
        ops_.name(loop.anchor) + ")");
  Decision decision{Decision::Next::kFollowLoop, loop.name, true, false, index};
  decision.loop_thread = loop.thread;
  return decision;
}

// Ops of the thread the loop was learned on, after the decision: each iteration (the ops from one
// call of the anchor to the next) is compared with the loop's usual one. A loop with an occasional
// other iteration (a log line, a checkpoint every N steps) goes on; one whose iterations mostly
// differ, or whose anchor no longer runs, has ended: the program moved on to another loop.
OpLoopFinder::LoopCheck OpLoopFinder::checkLoopStillRepeats(const char* name, std::uint64_t thread,
                                                            std::uint64_t steps_taken) {
  LoopCheck check;
  if (current_ >= loops_.size()) return check;
  Loop& loop = loops_[current_];
  if (thread != loop.thread) return check;
  std::uint32_t id = ops_.id(name);
  ops_.noteOp(id, thread);
  if (!inner_.collapse(id, thread)) return check;
  if (!verify_ops_.empty()) {
    verify_ops_.push_back(id);
    std::size_t size = verify_ops_.size();
    if ((size & (size - 1)) == 0) {
      // Judged again on more iterations: a loop of layers inside the iteration gives way to the
      // iteration (same phase, another anchor).
      std::optional<analyze::LoopShape> found =
          analyze::findLoop(verify_ops_, kMinRepeats, inner_.ops());
      if (found && found->anchor == kOtherOps) found.reset();
      if (found && found->period != loop.period && found->period == verify_period_) {
        trace("re-judged " + loop.name + ": period " + std::to_string(found->period) + " at " +
              ops_.name(found->anchor));
        loop.anchor = found->anchor;
        loop.period = found->period;
        loop.signature = found->signature;
        followed_.restartIteration();
        check.anchor_moved = true;
      }
      verify_period_ = found ? found->period : 0;
    }
    if (size >= verify_until_) verify_ops_ = {};
  }
  followed_.countOp();
  if (id == loop.anchor) {
    ++iterations_this_run_;
    if (std::optional<bool> matched =
            followed_.judgeEndedIteration(loop.period, loop.signature, steps_taken)) {
      if (!*matched && tracing()) {
        trace(loop.name + ": an iteration of " + std::to_string(followed_.endedLength()) +
              " ops unlike its usual one (" + std::to_string(loop.period) + " ops)");
      }
      if (!*matched && (insideABackwardIteration(loop, followed_.backwardAtItsStart()) ||
                        followed_.interruptedAgainAndAgain(loop.period))) {
        if (!loop.inner) {
          trace(loop.name + " runs inside a longer iteration, a varying number of times: " +
                "looking for that one");
          markInner(loop);
        }
        check.decision = leaveLoop(steps_taken);
        return check;
      }
      followed_.keepJudged(*matched);
    }
    followed_.startIteration(id, ops_.backwardOn(thread));
    if (followed_.mostlyUnlike()) check.decision = leaveLoop(steps_taken);
    return check;
  }
  followed_.addOp(id);
  // The anchor no longer runs: the program moved on to other work.
  if (followed_.opsSinceAnchor() > kAbsentPeriods * loop.period + kAbsentSlack) {
    check.decision = leaveLoop(steps_taken);
  }
  return check;
}

bool OpLoopFinder::settled() const { return verify_ops_.empty() && followed_.allRecentMatched(); }

bool OpLoopFinder::insideABackwardIteration(Loop& loop, std::uint64_t backward_before) {
  if (loop.runs_backward || loop.inner) return false;
  loop.runs_around_backward =
      ops_.backwardOn(loop.thread) > backward_before ? loop.runs_around_backward + 1 : 0;
  if (loop.runs_around_backward < kInnerLoopRuns) return false;
  trace(loop.name + " runs inside an iteration that runs backward: looking for that one");
  markInner(loop);
  return true;
}

void OpLoopFinder::markInner(Loop& loop) {
  if (loop.inner) return;
  loop.inner = true;
  for (std::uint32_t op : loop.ops) inner_.add(op);
  inner_.add(kInnerLoopRun);  // nor does a run of them
  inner_.forgetRuns();
  collapseStoredOps();
}

void OpLoopFinder::judgeAfresh() { followed_.judgeAfresh(); }

OpLoopFinder::Decision OpLoopFinder::leaveLoop(std::uint64_t steps_taken) {
  trace("leave " + loops_[current_].name + " after " + std::to_string(followed_.opsSinceAnchor()) +
        " ops since its anchor, " + std::to_string(followed_.recentMatches()) + " of " +
        std::to_string(followed_.recentJudged()) + " recent iterations matched");
  verify_ops_ = {};
  Loop& left = loops_[current_];
  left.backward_at_leave = ops_.backwardOn(left.thread);
  bool short_run = iterations_this_run_ < kInnerLoopIterations;
  left.short_runs_in_a_row =
      !short_run ? 0 : (last_left_loop_ == current_ ? left.short_runs_in_a_row + 1 : 1);
  last_left_loop_ = current_;
  if (left.short_runs_in_a_row >= kInnerLoopRuns && !left.inner) {
    // Its ops run several times in each iteration of the loop around it: none of them starts that
    // iteration, so none is taken as an anchor again.
    markInner(left);
    trace(left.name + " runs inside a longer iteration: looking for that one");
  }
  // The loop's last iteration ends here, in its phase; what ran since its last anchor (its last
  // iteration, and what came after) is outside loops until the next one is found.
  Decision decision{Decision::Next::kLearning, kOutsideLoops, true, true, 0};
  // The iterations that no longer matched, up to now, were the next phase's: so are their steps.
  decision.steps_back = followed_.stepsBack(steps_taken);
  resetLearning();
  return decision;
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::startWindows(
    report::OpLoopStepsTaken::WindowsBecause because, std::size_t ops) {
  windows_because_ = because;
  ops_when_windows_began_ = ops;
  ops_by_thread_.clear();
  // Without a loop found, windows for good: the ops are no longer needed. With loops found
  // before, their ops are still watched for, so they become steps again when they run.
  Decision decision{Decision::Next::kWindows, loops_.empty() ? "" : kWindowsPhase, false, false, 0};
  decision.ops_needed = !loops_.empty();
  return decision;
}

}  // namespace memseal::inject
