#include "inject/step_boundary.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "analyze/repeating_ops.h"
#include "inject/python_lock.h"
#include "track/memory_counters.h"
#include "track/device_events.h"

namespace memseal::inject {

namespace {

// Learning looks at each thread's ops at checkpoints (128, 192, 288, 432, ... ops: each half again
// as many); a loop is taken when a checkpoint finds one found at an earlier checkpoint (the same
// iteration, from any of its ops: a short phase, a validation pass of twenty batches, is taken
// when it runs again), or one repeated twice kMinRepeats times with nearly every iteration alike;
// learning is given up (time windows go on) at kLastCheckpoint ops or kMaxLearning (see
// kMinOpsBeforeTimeLimit). The decision is
// then checked iteration by iteration (checkLoopStillRepeats).
constexpr std::size_t kFirstCheckpoint = 128;
constexpr std::size_t kLastCheckpoint = 1 << 16;
constexpr std::size_t kMinRepeats = 8;
constexpr double kSureCoverage = 0.9;
constexpr auto kMaxLearning = std::chrono::seconds(10);
// The time limit counts only once this many ops were seen (or after kMaxLearningWithFewOps): on a
// loaded machine, or where the program prepares its data between loops, 10 s may pass before the
// loop has run often enough to be recognised.
constexpr std::size_t kMinOpsBeforeTimeLimit = 8192;
constexpr auto kMaxLearningWithFewOps = std::chrono::seconds(60);
constexpr auto kLearningTick = std::chrono::milliseconds(100);
// Steps closer than a multiple of what a step costs in the detector (on average) are one step, so
// a loop of microsecond iterations spends about a twentieth of its time there at most: never closer
// than kMinStepGap, and always taken kMaxStepGap apart (a step that wrote down a finding costs far
// more than the usual one).
constexpr auto kMinStepGap = std::chrono::microseconds(50);
constexpr auto kMaxStepGap = std::chrono::milliseconds(1);
constexpr int kStepCostMultiple = 20;
// A loop has ended when fewer than half of its last kJudgedIterations iterations matched, or when
// its anchor has not run for kAbsentPeriods iterations' worth of ops and kAbsentSlack more.
constexpr std::uint32_t kJudgedIterations = 8;
constexpr std::size_t kAbsentPeriods = 2;
constexpr std::size_t kAbsentSlack = 16;
// Loops found at earlier checkpoints, remembered across learnings: one found again is taken.
constexpr std::size_t kRememberedCandidates = 8;
// A loop found before runs again after this many of its iterations in a row.
constexpr int kRecognisedAfter = 2;
constexpr const char* kOutsideLoops = "outside loops";
constexpr std::size_t kMaxOpNames = 4096;
constexpr std::uint32_t kOtherOps = std::numeric_limits<std::uint32_t>::max();

// MEMSEAL_RUN_TRACE_STEPS=1: each decision of the loop finder on stderr, for memseal's developers.
bool tracing() {
  static const bool on = [] {
    const char* value = std::getenv("MEMSEAL_RUN_TRACE_STEPS");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return on;
}
void trace(const std::string& text) {
  if (tracing()) std::fprintf(stderr, "memseal run [steps]: %s\n", text.c_str());
}
constexpr const char* kWindowsPhase = "time windows";

std::atomic<StepBoundary*> g_boundary{nullptr};
thread_local int t_op_depth = 0;
std::atomic<std::uint64_t> g_next_thread{1};
thread_local std::uint64_t t_thread = 0;

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn) {
  bool outermost = t_op_depth++ == 0;
  if (StepBoundary* boundary = g_boundary.load(std::memory_order_acquire)) {
    boundary->onOp(fn.name(), outermost);
  }
  return nullptr;
}

// An op that started before the callback was installed ends without having started here: the
// depth stays at 0 rather than going below it (which would hide every later outermost op).
void onOpEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (t_op_depth > 0) --t_op_depth;
}

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

bool parseStepRule(const std::string& text, StepRule* rule, std::string* error) {
  StepRule parsed;
  if (text == "auto") {
    parsed.kind = StepRule::Kind::kAuto;
  } else if (text.rfind("interval:", 0) == 0) {
    char* end = nullptr;
    long long ns = std::strtoll(text.c_str() + 9, &end, 10);
    if (end == text.c_str() + 9 || *end != '\0' || ns <= 0) {
      *error = "bad step rule '" + text + "'";
      return false;
    }
    parsed.kind = StepRule::Kind::kInterval;
    parsed.interval = std::chrono::nanoseconds(ns);
  } else if (text.rfind("on:", 0) == 0 && text.size() > 3) {
    parsed.kind = StepRule::Kind::kOn;
    parsed.name = text.substr(3);
  } else {
    *error = "bad step rule '" + text + "'";
    return false;
  }
  *rule = parsed;
  return true;
}

std::string stepRuleText(const StepRule& rule) {
  switch (rule.kind) {
    case StepRule::Kind::kAuto:
      return "auto";
    case StepRule::Kind::kInterval:
      return "interval:" + std::to_string(rule.interval.count());
    case StepRule::Kind::kOn:
      return "on:" + rule.name;
  }
  return "auto";
}

bool stepNameMatches(const char* name, const std::string& wanted) {
  if (name == nullptr) return false;
  if (wanted == name) return true;
  const char* colons = std::strrchr(name, ':');
  const char* dot = std::strrchr(name, '.');
  const char* last = std::max(colons, dot);  // nullptr compares below any pointer into name
  return last != nullptr && wanted == last + 1;
}

StepBoundary::StepBoundary(StepRule rule, LeakDetector& detector, std::function<void()> after_step)
    : rule_(std::move(rule)), detector_(detector), after_step_(std::move(after_step)) {
  switch (rule_.kind) {
    case StepRule::Kind::kAuto:
      // No steps while the loop is learned: start-up (imports, loading a model) would look like
      // growth. Learning a loop takes a few dozen iterations.
      phase_ = Phase::kLearning;
      resetLearning();
      break;
    case StepRule::Kind::kInterval:
      phase_ = Phase::kWindows;
      next_window_.store(Clock::now() + rule_.interval);
      break;
    case StepRule::Kind::kOn:
      phase_ = Phase::kOps;
      anchor_ = rule_.name;
      break;
  }
  g_boundary.store(this, std::memory_order_release);
  // Time windows need no ops: without a callback, libtorch skips its RecordFunction work on every
  // op (unless the tracker watches ops), the largest cost of watching a loop of small ops.
  if (rule_.kind == StepRule::Kind::kInterval) return;
  // Outermost ops only need their names: no inputs, no outputs.
  callback_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&onOpStart, &onOpEnd)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::TORCHSCRIPT_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
}

StepBoundary::~StepBoundary() {
  g_boundary.store(nullptr, std::memory_order_release);
  if (callback_ != 0) at::removeCallback(callback_);
}

void StepBoundary::onOp(const char* name, bool outermost) {
  if (!outermost) return;
  switch (phase_.load(std::memory_order_acquire)) {
    case Phase::kLearning:
      if (learn(name)) applyPhaseChange(false);
      return;
    case Phase::kOps: {
      if (rule_.kind == StepRule::Kind::kOn) {
        if (stepNameMatches(name, anchor_)) takeStep();
        return;
      }
      if (t_thread != 0 && checkLoopStillRepeats(name)) {
        applyPhaseChange(false);
        return;
      }
      // Only on the loop's own thread: an op of the same name on one of libtorch's intra-op
      // workers is not an iteration.
      if (t_thread == 0 || t_thread != loop_thread_.load(std::memory_order_acquire)) return;
      bool anchor;
      {
        std::lock_guard<std::mutex> lock(anchor_mutex_);
        anchor = anchor_ == name;
      }
      if (anchor && phase_.load(std::memory_order_acquire) == Phase::kOps) takeStep();
      return;
    }
    case Phase::kWindows: {
      if (rule_.kind != StepRule::Kind::kAuto) return;
      // Loops found before may run again.
      bool changed = false;
      {
        std::lock_guard<std::mutex> lock(learn_mutex_);
        if (phase_.load() != Phase::kWindows || loops_.empty() || t_thread == 0) return;
        changed = recogniseKnownLoop(opId(name));
      }
      if (changed) applyPhaseChange(false);
      return;
    }
    case Phase::kSwitching:
    case Phase::kStopped:
      return;
  }
}

void StepBoundary::applyPhaseChange(bool on_runtime_thread) {
  PythonLock python(on_runtime_thread ? PythonLock::Threads::kAny
                                      : PythonLock::Threads::kPythonOnly);
  std::lock_guard<std::mutex> steps(step_mutex_);
  if (phase_.load() != Phase::kSwitching) return;  // stopped meanwhile (a forked child)
  PhaseChange change = change_;
  // Steps already taken that were the new phase's, and the one running now, join it first.
  if (change.phase_first && !change.detector_phase.empty()) {
    detector_.phase(change.detector_phase, static_cast<std::uint32_t>(change.steps_back));
    std::uint64_t moved =
        current_ < loop_steps_.size() ? std::min(loop_steps_[current_], change.steps_back) : 0;
    if (moved > 0) loop_steps_[current_] -= moved;
    steps_outside_loops_ += moved;
  }
  if (change.end_step && steps_taken_ > 0) {
    last_step_ = Clock::now();
    ++steps_taken_;
    steps_seen_.store(steps_taken_, std::memory_order_relaxed);
    ++steps_outside_loops_;
    detector_.step();
  }
  if (!change.phase_first && !change.detector_phase.empty()) {
    detector_.phase(change.detector_phase);
  }
  if (change.next == Phase::kOps) {
    current_ = change.loop;
    loop_steps_.resize(loops_size_, 0);
    loop_thread_.store(change.loop_thread, std::memory_order_release);
  }
  if (change.next == Phase::kWindows) next_window_.store(Clock::now() + kShortestWindow);
  phase_.store(change.next, std::memory_order_release);
}

void StepBoundary::onNamedScope(const char* name) {
  if (rule_.kind == StepRule::Kind::kOn && phase_.load(std::memory_order_acquire) == Phase::kOps &&
      stepNameMatches(name, anchor_)) {
    takeStep();
  }
}

bool StepBoundary::stepLocked(Clock::time_point now, bool coalesce, Phase expected) {
  std::lock_guard<std::mutex> lock(step_mutex_);
  Phase phase = phase_.load();
  // The phase the caller saw may have changed while it waited for the GIL or this lock.
  if (phase != expected) return false;
  if (coalesce && steps_taken_ > 0 && now - last_step_ < min_step_gap_) return false;
  last_step_ = now;
  ++steps_taken_;
  steps_seen_.store(steps_taken_, std::memory_order_relaxed);
  if (phase == Phase::kOps && rule_.kind == StepRule::Kind::kAuto &&
      current_ < loop_steps_.size()) {
    ++loop_steps_[current_];
  } else if (rule_.kind == StepRule::Kind::kAuto) {
    ++steps_outside_loops_;
  }
  detector_.step();
  // What a step costs on average (a verdict's renewal, one step in a few, costs most).
  Clock::duration cost = Clock::now() - now;
  step_cost_ = step_cost_ == Clock::duration::zero() ? cost : (4 * step_cost_ + cost) / 5;
  min_step_gap_ =
      std::clamp<Clock::duration>(kStepCostMultiple * step_cost_, kMinStepGap, kMaxStepGap);
  return true;
}

void StepBoundary::takeStep() {
  bool taken;
  {
    // The detector writes down findings at some steps, naming Python frames.
    PythonLock python(PythonLock::Threads::kPythonOnly);
    taken = stepLocked(Clock::now(), true, Phase::kOps);
  }
  if (taken && after_step_) after_step_();
}

std::uint32_t StepBoundary::opId(const char* name) {
  // Looked up by the name's text without making a string: no allocation once a name was seen.
  // (Not by address: the names of backward functions and record_function regions are made per
  // call, and a freed name's address is soon another name's.)
  auto known = op_ids_.find(std::string_view(name));
  if (known != op_ids_.end()) return known->second;
  // Bounded memory: names made per call (`ProfilerStep#N`, a region named after its batch) would
  // add one each; past kMaxOpNames, new names share one id (iterations with them do not match).
  if (op_names_.size() >= kMaxOpNames) return kOtherOps;
  op_names_.emplace_back(name);
  auto id = static_cast<std::uint32_t>(op_names_.size() - 1);
  op_ids_.emplace(std::string_view(op_names_.back()), id);
  return id;
}

void StepBoundary::resetLearning() {
  ops_by_thread_.clear();
  live_by_thread_.clear();
  ops_seen_ = 0;
  next_checkpoint_ = kFirstCheckpoint;
  for (Loop& loop : loops_) {
    loop.pending_started = false;
    loop.matched_in_a_row = 0;
  }
}

bool StepBoundary::learn(const char* name) {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  if (phase_.load() != Phase::kLearning) return false;
  if (ops_seen_++ == 0) first_op_ = Clock::now();
  if (t_thread == 0) t_thread = g_next_thread.fetch_add(1);
  std::uint32_t id = opId(name);
  if (recogniseKnownLoop(id)) return true;
  std::vector<std::uint32_t>& ops = ops_by_thread_[t_thread];
  ops.push_back(id);
  live_by_thread_[t_thread].push_back(track::cpuCounters().liveBytes());
  std::size_t size = ops.size();
  if (size < kFirstCheckpoint || size < next_checkpoint_) return false;
  // Each half again as many, so a short phase (twenty iterations of a validation pass) is still
  // judged before it ends.
  next_checkpoint_ = size + size / 2;
  return decideFromCheckpoint(ops, t_thread, size >= kLastCheckpoint);
}

bool StepBoundary::recogniseKnownLoop(std::uint32_t id) {
  for (std::size_t index = 0; index < loops_.size(); ++index) {
    Loop& loop = loops_[index];
    if (loop.thread != t_thread) continue;
    if (id == loop.anchor) {
      bool matched = loop.pending_started && loop.pending_length == loop.period &&
                     loop.pending_hash == loop.signature;
      loop.matched_in_a_row = matched ? loop.matched_in_a_row + 1 : 0;
      loop.pending_started = true;
      loop.pending_hash = analyze::foldOp(analyze::kEmptyOpsHash, id);
      loop.pending_length = 1;
      if (loop.matched_in_a_row >= kRecognisedAfter) {
        enterLoop(index);
        return true;
      }
      continue;
    }
    if (!loop.pending_started) continue;
    loop.pending_hash = analyze::foldOp(loop.pending_hash, id);
    // Past the iteration's length it cannot match: wait for the anchor.
    if (++loop.pending_length > loop.period) loop.pending_started = false;
  }
  return false;
}

bool StepBoundary::decideFromCheckpoint(const std::vector<std::uint32_t>& ops, std::uint64_t thread,
                                        bool time_is_up) {
  std::optional<analyze::LoopShape> found = analyze::findLoop(ops, kMinRepeats);
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
    loop.thread = thread;
    loop.found_after = ops.size();
    loop.name = "loop " + std::to_string(loops_.size() + 1) + " (" + op_names_[found->anchor] + ")";
    loops_.push_back(std::move(loop));
    verify_ops_ = ops;
    verify_until_ = std::min(kLastCheckpoint, 8 * ops.size());
    verify_period_ = 0;
    candidates_.clear();
    enterLoop(loops_.size() - 1);
    return true;
  }
  if (!time_is_up) return false;
  return startWindows(found ? "the loop's ops repeated, but changed between checks"
                            : "the program's outermost ops did not repeat (" +
                                  std::to_string(ops.size()) + " ops seen on its busiest thread)");
}

// Any op that runs once per iteration could end a step; the one chosen is where the least tensor
// memory is live, between one iteration's last use of its tensors and the next iteration's first
// (after zero_grad freed the gradients, before the forward pass): what the previous iteration did
// last (`total_loss += loss` after optimizer.step()) then belongs to its own step.
void StepBoundary::startAtLeastLiveMemory(analyze::LoopShape& loop,
                                          const std::vector<std::uint32_t>& ops,
                                          const std::vector<std::int64_t>& live) {
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
    if (count[iteration[j]] != 1 || iteration[j] == kOtherOps) continue;
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

void StepBoundary::enterLoop(std::size_t index) {
  Loop& loop = loops_[index];
  loop.runs += 1;
  loop.pending_started = false;
  loop.matched_in_a_row = 0;
  segment_started_ = false;
  segment_hash_ = analyze::kEmptyOpsHash;
  segment_length_ = 0;
  recent_matches_ = 0;
  recent_judged_ = 0;
  mismatching_ = false;
  ops_since_anchor_ = 0;
  ops_by_thread_.clear();
  {
    std::lock_guard<std::mutex> lock(anchor_mutex_);
    anchor_ = op_names_[loop.anchor];
  }
  // What ran since the last step (learning, after another loop ended) is a step outside loops;
  // the program's very first one (start-up) becomes part of the loop's first step.
  trace("enter " + loop.name + " (period " + std::to_string(loop.period) + ", anchor " +
        op_names_[loop.anchor] + ")");
  change_ = PhaseChange{Phase::kOps, loop.name, true, false, index};
  change_.loop_thread = loop.thread;
  loops_size_ = loops_.size();
  phase_.store(Phase::kSwitching, std::memory_order_release);
}

// Ops of the thread the loop was learned on, after the decision: each iteration (the ops from one
// call of the anchor to the next) is compared with the loop's usual one. A loop with an occasional
// other iteration (a log line, a checkpoint every N steps) goes on; one whose iterations mostly
// differ, or whose anchor no longer runs, has ended: the program moved on to another loop.
bool StepBoundary::checkLoopStillRepeats(const char* name) {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  if (phase_.load() != Phase::kOps || current_ >= loops_.size()) return false;
  Loop& loop = loops_[current_];
  if (t_thread != loop.thread) return false;
  std::uint32_t id = opId(name);
  if (!verify_ops_.empty()) {
    verify_ops_.push_back(id);
    std::size_t size = verify_ops_.size();
    if ((size & (size - 1)) == 0) {
      // Judged again on more iterations: a loop of layers inside the iteration gives way to the
      // iteration (same phase, another anchor).
      std::optional<analyze::LoopShape> found = analyze::findLoop(verify_ops_, kMinRepeats);
      if (found && found->anchor == kOtherOps) found.reset();
      if (found && found->period != loop.period && found->period == verify_period_) {
        trace("re-judged " + loop.name + ": period " + std::to_string(found->period) + " at " +
              op_names_[found->anchor]);
        loop.anchor = found->anchor;
        loop.period = found->period;
        loop.signature = found->signature;
        segment_started_ = false;
        std::lock_guard<std::mutex> anchor(anchor_mutex_);
        anchor_ = op_names_[loop.anchor];
      }
      verify_period_ = found ? found->period : 0;
    }
    if (size >= verify_until_) verify_ops_ = {};
  }
  ++ops_since_anchor_;
  if (id == loop.anchor) {
    if (segment_started_) {
      bool matched = segment_length_ == loop.period && segment_hash_ == loop.signature;
      if (!matched && !mismatching_)
        steps_at_mismatch_ = steps_seen_.load(std::memory_order_relaxed);
      mismatching_ = !matched;
      recent_matches_ =
          ((recent_matches_ << 1) | (matched ? 1u : 0u)) & ((1u << kJudgedIterations) - 1);
      recent_judged_ = std::min(recent_judged_ + 1, kJudgedIterations);
    }
    segment_started_ = true;
    segment_hash_ = analyze::foldOp(analyze::kEmptyOpsHash, id);
    segment_length_ = 1;
    ops_since_anchor_ = 0;
    int matched = __builtin_popcount(recent_matches_);
    if (recent_judged_ >= kJudgedIterations && 2 * matched < static_cast<int>(kJudgedIterations)) {
      leaveLoop();
      return true;
    }
    return false;
  }
  if (segment_started_) {
    segment_hash_ = analyze::foldOp(segment_hash_, id);
    ++segment_length_;
  }
  // The anchor no longer runs: the program moved on to other work.
  if (ops_since_anchor_ > kAbsentPeriods * loop.period + kAbsentSlack) {
    leaveLoop();
    return true;
  }
  return false;
}

void StepBoundary::leaveLoop() {
  trace("leave " + loops_[current_].name + " after " + std::to_string(ops_since_anchor_) +
        " ops since its anchor, " + std::to_string(__builtin_popcount(recent_matches_)) + " of " +
        std::to_string(recent_judged_) + " recent iterations matched");
  verify_ops_ = {};
  ++relearned_;
  // The loop's last iteration ends here, in its phase; what follows is outside loops until the
  // next one is found.
  // What ran since its last anchor (its last iteration, and what came after) is outside loops.
  change_ = PhaseChange{Phase::kLearning, kOutsideLoops, true, true, 0};
  // The iterations that no longer matched, up to now, were the next phase's: so are their steps.
  if (mismatching_) {
    change_.steps_back = steps_seen_.load(std::memory_order_relaxed) - steps_at_mismatch_;
  }
  phase_.store(Phase::kSwitching, std::memory_order_release);
  resetLearning();
  first_op_ = Clock::now();
}

bool StepBoundary::startWindows(std::string reason) {
  if (phase_.load() != Phase::kLearning) return false;
  decision_ = "time windows sized to the run (" + std::to_string(kShortestWindow.count()) +
              " ms at first, then 1/" + std::to_string(kWindowsPerRun) +
              " of the time since tracking started): " + reason;
  ops_by_thread_.clear();
  // Without a loop found, windows for good: the ops are no longer needed. With loops found
  // before, their ops are still watched for, so they become steps again when they run.
  if (loops_.empty() && callback_ != 0) {
    at::removeCallback(callback_);
    callback_ = 0;
  }
  change_ = PhaseChange{Phase::kWindows, loops_.empty() ? "" : kWindowsPhase, false, false, 0};
  phase_.store(Phase::kSwitching, std::memory_order_release);
  return true;
}

namespace {

// Allocations and frees the program has made so far, CPU and CUDA.
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

}  // namespace

std::chrono::nanoseconds StepBoundary::untilNextTick() const {
  Phase phase = phase_.load();
  if (phase != Phase::kWindows) return kLearningTick;
  std::chrono::nanoseconds left = next_window_.load() - Clock::now();
  return std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0));
}

void StepBoundary::tick() {
  if (phase_.load() == Phase::kLearning) {
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(learn_mutex_);
      Clock::duration learning = Clock::now() - first_op_;
      if (phase_.load() == Phase::kLearning && ops_seen_ > 0 && learning >= kMaxLearning &&
          (ops_seen_ >= kMinOpsBeforeTimeLimit || learning >= kMaxLearningWithFewOps)) {
        const std::vector<std::uint32_t>* busiest = nullptr;
        std::uint64_t busiest_thread = 0;
        for (const auto& [thread, ops] : ops_by_thread_) {
          if (busiest == nullptr || ops.size() > busiest->size()) {
            busiest = &ops;
            busiest_thread = thread;
          }
        }
        if (busiest != nullptr) {
          std::vector<std::uint32_t> ops = *busiest;
          changed = decideFromCheckpoint(ops, busiest_thread, true);
        }
      }
    }
    if (changed) applyPhaseChange(true);
  }
  if (phase_.load() != Phase::kWindows) return;
  Clock::time_point now = Clock::now();
  if (now < next_window_.load()) return;
  std::chrono::nanoseconds window = rule_.interval;
  if (rule_.kind != StepRule::Kind::kInterval) {
    window = runSizedWindow(now - started_);
  }
  // A window in which the program allocated and freed nothing says nothing about what it keeps:
  // it is no step, and the window goes on. A program waiting on I/O, or starved of the CPU by a
  // busy machine, would otherwise fill its run with empty steps, and growth that comes from every
  // active step would look as if it came from a few.
  std::int64_t activity = memoryActivity();
  if (activity == window_activity_.exchange(activity)) {
    next_window_.store(now + window);
    return;
  }
  {
    bool taken;
    {
      PythonLock python;
      taken = stepLocked(now, false, Phase::kWindows);
    }
    if (!taken) return;
    if (after_step_) after_step_();
  }
  next_window_.store(now + window);
}

std::vector<std::string> StepBoundary::description() {
  std::lock_guard<std::mutex> learn(learn_mutex_);
  std::lock_guard<std::mutex> lock(step_mutex_);
  std::string steps = " (" + std::to_string(steps_taken_) + " steps)";
  switch (rule_.kind) {
    case StepRule::Kind::kOn:
      return {"memseal run: one step per outermost call of " + rule_.name + " (--step-on)" + steps};
    case StepRule::Kind::kInterval:
      return {"memseal run: steps are time windows of " + durationText(rule_.interval) +
              " (--interval)" + steps};
    case StepRule::Kind::kAuto:
      break;
  }
  std::vector<std::string> lines;
  if (loops_.empty()) {
    if (phase_.load() == Phase::kWindows) return {"memseal run: " + decision_ + steps};
    return {"memseal run: the program ended before its loop was found (" +
            std::to_string(ops_seen_) +
            " outermost ops seen: too few iterations, or ops that never repeat); --interval "
            "DURATION or --step-on NAME sets the steps" +
            steps};
  }
  std::string summary = "memseal run: " + std::to_string(steps_taken_) + " steps in " +
                        std::to_string(loops_.size()) + (loops_.size() == 1 ? " loop" : " loops") +
                        " found in the program's ops";
  if (steps_outside_loops_ > 0) {
    summary += ", and " + std::to_string(steps_outside_loops_) +
               " outside them (start-up, between loops" +
               (decision_.empty() ? std::string(")") : ", time windows)");
  }
  lines.push_back(summary);
  for (std::size_t i = 0; i < loops_.size(); ++i) {
    const Loop& loop = loops_[i];
    std::uint64_t loop_steps = i < loop_steps_.size() ? loop_steps_[i] : 0;
    lines.push_back("memseal run: " + loop.name + ": one step per call of " +
                    op_names_[loop.anchor] + ", the op that starts each of its iterations (" +
                    std::to_string(loop.period) + " ops, found after " +
                    std::to_string(loop.found_after) + " ops): " + std::to_string(loop_steps) +
                    " steps in " + std::to_string(loop.runs) + (loop.runs == 1 ? " run" : " runs"));
  }
  if (!decision_.empty() && phase_.load() == Phase::kWindows) {
    lines.push_back("memseal run: then " + decision_);
  }
  return lines;
}

}  // namespace memseal::inject
