#include "inject/op_loop_finder.h"

#include <algorithm>

#include "inject/step_tuning.h"

namespace memseal::inject {

namespace {

void addOnce(std::vector<std::uint32_t>& ops, std::uint32_t op) {
  if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
}

// The ops of the loop's usual iterations in `ops`: those from a call of `anchor` to the next that
// are `period` ops long (an iteration that runs on into what follows the loop is longer).
std::vector<std::uint32_t> usualIterationOps(const std::vector<std::uint32_t>& ops,
                                             std::uint32_t anchor, std::size_t period) {
  std::vector<std::uint32_t> found;
  std::size_t start = ops.size();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] != anchor) continue;
    if (start < i && i - start == period) {
      for (std::size_t j = start; j < i; ++j) addOnce(found, ops[j]);
    }
    start = i;
  }
  return found;
}

}  // namespace

OpLoopFinder::OpLoopFinder(TimeLimits limits) : limits_(limits) { resetLearning(); }

std::uint32_t OpLoopFinder::opId(const char* name) {
  // Looked up by the name's text without making a string: no allocation once a name was seen.
  // (Not by address: the names of backward functions and record_function regions are made per
  // call, and a freed name's address is soon another name's.)
  auto known = op_ids_.find(std::string_view(name));
  if (known != op_ids_.end()) return known->second;
  // Bounded memory: names made per call (`ProfilerStep#N`, a region named after its batch) would
  // add one each; past kMaxOpNames, new names share one id (iterations with them do not match).
  if (op_names_.size() >= kMaxOpNames) return kOtherOps;
  op_names_.emplace_back(name);
  backward_op_.push_back(op_names_.back().rfind(kBackwardOpPrefix, 0) == 0);
  auto id = static_cast<std::uint32_t>(op_names_.size() - 1);
  op_ids_.emplace(std::string_view(op_names_.back()), id);
  return id;
}

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
  std::uint32_t id = opId(name);
  noteBackward(id, thread);
  if (!collapseInnerLoops(id, thread)) return std::nullopt;
  std::size_t inner_ops = inner_loop_ops_.size();
  if (std::optional<Decision> recognised = recogniseKnownLoop(id, thread)) return recognised;
  // A loop just found to lie inside a longer iteration may have this op: seen as its run.
  if (inner_loop_ops_.size() != inner_ops && !collapseInnerLoops(id, thread)) return std::nullopt;
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
  std::uint32_t id = opId(name);
  noteBackward(id, thread);
  if (!collapseInnerLoops(id, thread)) return std::nullopt;
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
    if (!mayStartIteration(op)) continue;
    addOnce(inner_loop_ops_, op);
    added = true;
  }
  if (!added) return false;
  addOnce(inner_loop_ops_, kInnerLoopRun);
  trace("ops repeated a varying number of times: " + std::to_string(varying.size()) +
        " ops of loops inside a longer iteration");
  collapseStoredOps();
  return true;
}

void OpLoopFinder::collapseStoredOps() {
  for (auto& [each, ops] : ops_by_thread_) {
    std::vector<std::int64_t>& live = live_by_thread_[each];
    std::size_t kept = 0;
    in_inner_run_[each] = false;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::uint32_t id = ops[i];
      if (!collapseInnerLoops(id, each)) continue;
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
  std::optional<analyze::LoopShape> found = analyze::findLoop(ops, kMinRepeats, inner_loop_ops_);
  if (!found && markLoopsOfVaryingLength(thread)) {
    found = analyze::findLoop(ops, kMinRepeats, inner_loop_ops_);
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
                       op_names_[found->anchor] + ", " + std::to_string(found->repeats) +
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
    startAtLeastLiveMemory(*found, ops, live_by_thread_[thread]);
    loop.anchor = found->anchor;
    loop.period = found->period;
    loop.signature = found->signature;
    loop.ops = usualIterationOps(ops, found->anchor, found->period);
    loop.runs_backward = std::any_of(loop.ops.begin(), loop.ops.end(), [&](std::uint32_t op) {
      return op < backward_op_.size() && backward_op_[op];
    });
    loop.thread = thread;
    loop.found_after = ops.size();
    loop.name = "loop " + std::to_string(loops_.size() + 1) + " (" + op_names_[found->anchor] + ")";
    loops_.push_back(std::move(loop));
    verify_ops_ = ops;
    verify_until_ = std::min(kLastCheckpoint, 8 * ops.size());
    verify_period_ = 0;
    candidates_.clear();
    return enterLoop(loops_.size() - 1);
  }
  if (!time_is_up) return std::nullopt;
  return startWindows(found ? "the loop's ops repeated, but changed between checks"
                            : "the program's outermost ops did not repeat (" +
                                  std::to_string(ops.size()) + " ops seen on its busiest thread)");
}

// Any op that runs once per iteration could end a step; the one chosen is where the least tensor
// memory is live, between one iteration's last use of its tensors and the next iteration's first
// (after zero_grad freed the gradients, before the forward pass): what the previous iteration did
// last (`total_loss += loss` after optimizer.step()) then belongs to its own step.
bool OpLoopFinder::mayStartIteration(std::uint32_t id) const {
  return id != kOtherOps && id != kInnerLoopRun &&
         std::find(inner_loop_ops_.begin(), inner_loop_ops_.end(), id) == inner_loop_ops_.end();
}

bool OpLoopFinder::collapseInnerLoops(std::uint32_t& id, std::uint64_t thread) {
  if (inner_loop_ops_.empty()) return true;
  bool inner =
      std::find(inner_loop_ops_.begin(), inner_loop_ops_.end(), id) != inner_loop_ops_.end();
  bool& in_run = in_inner_run_[thread];
  if (!inner) {
    in_run = false;
    return true;
  }
  if (in_run) return false;
  in_run = true;
  id = kInnerLoopRun;
  return true;
}

void OpLoopFinder::startAtLeastLiveMemory(analyze::LoopShape& loop,
                                          const std::vector<std::uint32_t>& ops,
                                          const std::vector<std::int64_t>& live) const {
  if (live.size() != ops.size() || loop.period == 0) return;
  // The usual iterations in the window, newest first (up to 16).
  std::vector<std::size_t> starts;
  for (std::size_t i = ops.size(); i-- > 0 && starts.size() < 16;) {
    if (ops[i] != loop.anchor || i + loop.period > ops.size()) continue;
    std::uint64_t hash = analyze::kEmptyOpsHash;
    for (std::size_t j = 0; j < loop.period; ++j) hash = analyze::foldOp(hash, ops[i + j]);
    if (hash == loop.signature) starts.push_back(i);
  }
  if (starts.empty()) return;
  const std::uint32_t* iteration = ops.data() + starts.front();
  std::unordered_map<std::uint32_t, std::size_t> count;
  for (std::size_t j = 0; j < loop.period; ++j) ++count[iteration[j]];
  std::size_t best = 0;
  std::optional<double> best_live;
  for (std::size_t j = 0; j < loop.period; ++j) {
    if (count[iteration[j]] != 1 || !mayStartIteration(iteration[j])) continue;
    double sum = 0;
    for (std::size_t start : starts) sum += static_cast<double>(live[start + j]);
    double mean = sum / static_cast<double>(starts.size());
    if (!best_live || mean < *best_live) {
      best = j;
      best_live = mean;
    }
  }
  if (best == 0) return;
  std::uint64_t hash = analyze::kEmptyOpsHash;
  for (std::size_t j = 0; j < loop.period; ++j) {
    hash = analyze::foldOp(hash, iteration[(best + j) % loop.period]);
  }
  loop.anchor = iteration[best];
  loop.signature = hash;
}

OpLoopFinder::Decision OpLoopFinder::enterLoop(std::size_t index) {
  Loop& loop = loops_[index];
  loop.runs += 1;
  current_ = index;
  iterations_this_run_ = 0;
  loop.pending_started = false;
  loop.matched_in_a_row = 0;
  segment_started_ = false;
  segment_hash_ = analyze::kEmptyOpsHash;
  segment_length_ = 0;
  recent_matches_ = 0;
  recent_judged_ = 0;
  mismatching_ = false;
  ops_since_anchor_ = 0;
  matched_run_ = 0;
  interrupted_runs_.clear();
  ops_by_thread_.clear();
  // What ran since the last step (learning, after another loop ended) is a step outside loops;
  // the program's very first one (start-up) becomes part of the loop's first step.
  trace("enter " + loop.name + " (period " + std::to_string(loop.period) + ", anchor " +
        op_names_[loop.anchor] + ")");
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
  std::uint32_t id = opId(name);
  noteBackward(id, thread);
  if (!collapseInnerLoops(id, thread)) return check;
  if (!verify_ops_.empty()) {
    verify_ops_.push_back(id);
    std::size_t size = verify_ops_.size();
    if ((size & (size - 1)) == 0) {
      // Judged again on more iterations: a loop of layers inside the iteration gives way to the
      // iteration (same phase, another anchor).
      std::optional<analyze::LoopShape> found =
          analyze::findLoop(verify_ops_, kMinRepeats, inner_loop_ops_);
      if (found && found->anchor == kOtherOps) found.reset();
      if (found && found->period != loop.period && found->period == verify_period_) {
        trace("re-judged " + loop.name + ": period " + std::to_string(found->period) + " at " +
              op_names_[found->anchor]);
        loop.anchor = found->anchor;
        loop.period = found->period;
        loop.signature = found->signature;
        segment_started_ = false;
        check.anchor_moved = true;
      }
      verify_period_ = found ? found->period : 0;
    }
    if (size >= verify_until_) verify_ops_ = {};
  }
  ++ops_since_anchor_;
  if (id == loop.anchor) {
    ++iterations_this_run_;
    if (segment_started_) {
      bool matched = segment_length_ == loop.period && segment_hash_ == loop.signature;
      if (!matched && tracing()) {
        trace(loop.name + ": an iteration of " + std::to_string(segment_length_) + " ops unlike " +
              "its usual one (" + std::to_string(loop.period) + " ops)");
      }
      if (!matched && !mismatching_) steps_at_mismatch_ = steps_taken;
      mismatching_ = !matched;
      if (matched) {
        ++matched_run_;
      } else if (insideABackwardIteration(loop, segment_backward_) ||
                 interruptedAgainAndAgain(loop.period)) {
        if (!loop.inner) {
          trace(loop.name + " runs inside a longer iteration, a varying number of times: " +
                "looking for that one");
          markInner(loop);
        }
        check.decision = leaveLoop(steps_taken);
        return check;
      }
      recent_matches_ =
          ((recent_matches_ << 1) | (matched ? 1u : 0u)) & ((1u << kJudgedIterations) - 1);
      recent_judged_ = std::min(recent_judged_ + 1, kJudgedIterations);
    }
    segment_started_ = true;
    segment_hash_ = analyze::foldOp(analyze::kEmptyOpsHash, id);
    segment_length_ = 1;
    segment_backward_ = backwardOn(thread);
    ops_since_anchor_ = 0;
    int matched = __builtin_popcount(recent_matches_);
    if (recent_judged_ >= kJudgedIterations && 2 * matched < static_cast<int>(kJudgedIterations)) {
      check.decision = leaveLoop(steps_taken);
    }
    return check;
  }
  if (segment_started_) {
    segment_hash_ = analyze::foldOp(segment_hash_, id);
    ++segment_length_;
  }
  // The anchor no longer runs: the program moved on to other work.
  if (ops_since_anchor_ > kAbsentPeriods * loop.period + kAbsentSlack) {
    check.decision = leaveLoop(steps_taken);
  }
  return check;
}

bool OpLoopFinder::settled() const {
  constexpr std::uint32_t all = (1u << kJudgedIterations) - 1;
  return verify_ops_.empty() && recent_judged_ >= kJudgedIterations && recent_matches_ == all;
}

bool OpLoopFinder::insideABackwardIteration(Loop& loop, std::uint64_t backward_before) {
  if (loop.runs_backward || loop.inner) return false;
  loop.runs_around_backward =
      backwardOn(loop.thread) > backward_before ? loop.runs_around_backward + 1 : 0;
  if (loop.runs_around_backward < kInnerLoopRuns) return false;
  trace(loop.name + " runs inside an iteration that runs backward: looking for that one");
  markInner(loop);
  return true;
}

bool OpLoopFinder::interruptedAgainAndAgain(std::size_t period) {
  // The iteration that broke the run adds a quarter of an iteration's ops or more (the rest of the
  // longer iteration; a log line adds less) to a short run, as findLoop tells a layer inside the
  // iteration from it. Runs all of one length are left to findLoop's own rule: they are what a
  // log line every N iterations gives.
  bool interrupted =
      matched_run_ > 0 && matched_run_ < kInnerLoopIterations && 4 * segment_length_ >= 5 * period;
  if (interrupted) {
    interrupted_runs_.push_back(matched_run_);
  } else {
    interrupted_runs_.clear();
  }
  matched_run_ = 0;
  if (interrupted_runs_.size() < static_cast<std::size_t>(kInnerLoopRuns)) return false;
  bool varying = std::any_of(interrupted_runs_.begin(), interrupted_runs_.end(),
                             [&](std::uint32_t run) { return run != interrupted_runs_.front(); });
  interrupted_runs_.erase(interrupted_runs_.begin());
  return varying;
}

void OpLoopFinder::markInner(Loop& loop) {
  if (loop.inner) return;
  loop.inner = true;
  for (std::uint32_t op : loop.ops) addOnce(inner_loop_ops_, op);
  addOnce(inner_loop_ops_, kInnerLoopRun);  // nor does a run of them
  in_inner_run_.clear();
  collapseStoredOps();
}

void OpLoopFinder::judgeAfresh() {
  segment_started_ = false;
  recent_matches_ = 0;
  recent_judged_ = 0;
  mismatching_ = false;
  ops_since_anchor_ = 0;
}

OpLoopFinder::Decision OpLoopFinder::leaveLoop(std::uint64_t steps_taken) {
  trace("leave " + loops_[current_].name + " after " + std::to_string(ops_since_anchor_) +
        " ops since its anchor, " + std::to_string(__builtin_popcount(recent_matches_)) + " of " +
        std::to_string(recent_judged_) + " recent iterations matched");
  verify_ops_ = {};
  Loop& left = loops_[current_];
  left.backward_at_leave = backwardOn(left.thread);
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
  if (mismatching_) decision.steps_back = steps_taken - steps_at_mismatch_;
  resetLearning();
  return decision;
}

std::optional<OpLoopFinder::Decision> OpLoopFinder::startWindows(std::string reason) {
  windows_decision_ = "time windows sized to the run (" + std::to_string(kShortestWindow.count()) +
                      " ms at first, then 1/" + std::to_string(kWindowsPerRun) +
                      " of the time since tracking started): " + reason;
  ops_by_thread_.clear();
  // Without a loop found, windows for good: the ops are no longer needed. With loops found
  // before, their ops are still watched for, so they become steps again when they run.
  Decision decision{Decision::Next::kWindows, loops_.empty() ? "" : kWindowsPhase, false, false, 0};
  decision.ops_needed = !loops_.empty();
  return decision;
}

}  // namespace memseal::inject
