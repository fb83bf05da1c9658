#include "inject/step_boundary.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "analyze/repeating_ops.h"

namespace memseal::inject {

namespace {

// Learning looks at each thread's ops at 256, 512, 1024, ... ops; the loop is taken when two
// checkpoints in a row find the same period with kMinRepeats whole iterations, and given up (time
// windows go on) at kLastCheckpoint ops or kMaxLearning. The decision is then checked op by op
// (checkLoopStillRepeats).
constexpr std::size_t kFirstCheckpoint = 256;
constexpr std::size_t kLastCheckpoint = 1 << 16;
constexpr std::size_t kMinRepeats = 8;
constexpr auto kMaxLearning = std::chrono::seconds(10);
constexpr auto kLearningTick = std::chrono::milliseconds(100);
// Steps closer than this are one step: a loop of microsecond iterations would spend its time in
// the detector.
constexpr auto kMinStepGap = std::chrono::milliseconds(1);

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
      break;
    case StepRule::Kind::kInterval:
      phase_ = Phase::kWindows;
      next_window_ = Clock::now() + rule_.interval;
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
  switch (phase_.load(std::memory_order_acquire)) {
    case Phase::kLearning:
      if (outermost) learn(name);
      return;
    case Phase::kOps:
      if (!outermost) return;
      if (rule_.kind == StepRule::Kind::kOn) {
        if (stepNameMatches(name, anchor_)) takeStep();
        return;
      }
      if (t_thread != 0 && t_thread == anchor_thread_) checkLoopStillRepeats(name);
      if (anchor_ == name) takeStep();
      return;
    case Phase::kWindows:
    case Phase::kStopped:
      return;
  }
}

void StepBoundary::onNamedScope(const char* name) {
  if (rule_.kind == StepRule::Kind::kOn && phase_.load(std::memory_order_acquire) == Phase::kOps &&
      stepNameMatches(name, anchor_)) {
    takeStep();
  }
}

bool StepBoundary::stepLocked(Clock::time_point now, bool coalesce) {
  std::lock_guard<std::mutex> lock(step_mutex_);
  Phase phase = phase_.load();
  if (phase == Phase::kStopped) return false;
  if (coalesce && steps_taken_ > 0 && now - last_step_ < kMinStepGap) return false;
  last_step_ = now;
  ++steps_taken_;
  detector_.step();
  return true;
}

void StepBoundary::takeStep() {
  if (stepLocked(Clock::now(), true) && after_step_) after_step_();
}

std::uint32_t StepBoundary::opId(const char* name) {
  // Looked up by the name's text without making a string: no allocation once a name was seen.
  // (Not by address: the names of backward functions and record_function regions are made per
  // call, and a freed name's address is soon another name's.)
  auto known = op_ids_.find(std::string_view(name));
  if (known != op_ids_.end()) return known->second;
  op_names_.emplace_back(name);
  auto id = static_cast<std::uint32_t>(op_names_.size() - 1);
  op_ids_.emplace(std::string_view(op_names_.back()), id);
  return id;
}

void StepBoundary::learn(const char* name) {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  if (phase_.load() != Phase::kLearning) return;
  if (ops_seen_++ == 0) first_op_ = Clock::now();
  if (t_thread == 0) t_thread = g_next_thread.fetch_add(1);
  std::vector<std::uint32_t>& ops = ops_by_thread_[t_thread];
  ops.push_back(opId(name));
  std::size_t size = ops.size();
  if (size >= kFirstCheckpoint && (size & (size - 1)) == 0) {
    decideFromCheckpoint(ops, t_thread, size >= kLastCheckpoint);
  }
}

void StepBoundary::decideFromCheckpoint(const std::vector<std::uint32_t>& ops, std::uint64_t thread,
                                        bool time_is_up) {
  auto found = analyze::findRepeatingOp(ops, kMinRepeats);
  bool agreed = found && found->period == last_period_;
  last_period_ = found ? found->period : 0;
  if (agreed) {
    anchor_ = op_names_[found->op];
    decision_ = "one step per call of " + anchor_ +
                ", the op that runs once per iteration of the program's loop (its ops "
                "repeat every " +
                std::to_string(found->period) + " ops; found after " + std::to_string(ops.size()) +
                " ops)";
    // The thread's next ops must go on repeating the last period: ring[i % period] holds what
    // op i must be.
    ring_.assign(found->period, 0);
    for (std::size_t i = ops.size() - found->period; i < ops.size(); ++i) {
      ring_[i % found->period] = ops[i];
    }
    ring_position_ = ops.size();
    anchor_thread_ = thread;
    std::lock_guard<std::mutex> steps(step_mutex_);
    phase_.store(Phase::kOps, std::memory_order_release);
    ops_by_thread_.clear();
    return;
  }
  if (time_is_up) {
    startWindows(found ? "the loop's ops repeated, but changed between checks"
                       : "the program's outermost ops did not repeat exactly (" +
                             std::to_string(ops.size()) + " ops seen on its busiest thread)");
  }
}

// Ops of the thread the loop was learned on, after the decision. A deep model's forward repeats
// its layers for a while and can look like the loop; when its ops stop repeating, the loop was not
// found yet: back to windows and learning.
void StepBoundary::checkLoopStillRepeats(const char* name) {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  if (phase_.load() != Phase::kOps || ring_.empty()) return;
  std::uint32_t id = opId(name);
  std::size_t period = ring_.size();
  std::uint32_t& expected = ring_[ring_position_ % period];
  ++ring_position_;
  if (expected != id) ++mismatches_;
  expected = id;  // an op that moved is expected where it is now
  // Judged per block of 4 periods: a loop with an occasional extra op (a log line's item(), a
  // checkpoint every N steps) still repeats; one whose ops mostly differ was not the loop.
  if (ring_position_ % (4 * period) != 0) return;
  bool repeats = mismatches_ <= period;  // at most a quarter of the block's ops
  mismatches_ = 0;
  if (repeats) return;
  ++relearned_;
  last_period_ = 0;
  ring_.clear();
  std::lock_guard<std::mutex> steps(step_mutex_);
  phase_.store(Phase::kLearning, std::memory_order_release);
}

void StepBoundary::startWindows(std::string reason) {
  std::lock_guard<std::mutex> steps(step_mutex_);
  if (phase_.load() != Phase::kLearning) return;
  decision_ = "time windows sized to the run (" + std::to_string(kShortestWindow.count()) +
              " ms at first, then 1/" + std::to_string(kWindowsPerRun) +
              " of the time since tracking started): " + reason;
  next_window_ = Clock::now() + kShortestWindow;
  phase_.store(Phase::kWindows, std::memory_order_release);
  ops_by_thread_.clear();
  // Windows for good: the ops are no longer needed.
  if (callback_ != 0) {
    at::removeCallback(callback_);
    callback_ = 0;
  }
}

std::chrono::nanoseconds StepBoundary::untilNextTick() const {
  Phase phase = phase_.load();
  if (phase != Phase::kWindows && phase != Phase::kLearning) return kLearningTick;
  if (phase == Phase::kLearning) return kLearningTick;
  std::chrono::nanoseconds left = next_window_ - Clock::now();
  return std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0));
}

void StepBoundary::tick() {
  if (phase_.load() == Phase::kLearning) {
    std::lock_guard<std::mutex> lock(learn_mutex_);
    if (phase_.load() == Phase::kLearning && ops_seen_ > 0 &&
        Clock::now() - first_op_ >= kMaxLearning) {
      const std::vector<std::uint32_t>* busiest = nullptr;
      for (const auto& [thread, ops] : ops_by_thread_) {
        if (busiest == nullptr || ops.size() > busiest->size()) busiest = &ops;
      }
      if (busiest != nullptr) decideFromCheckpoint(*busiest, 0, true);
    }
  }
  if (phase_.load() != Phase::kWindows) return;
  Clock::time_point now = Clock::now();
  if (now < next_window_) return;
  {
    if (!stepLocked(now, false)) return;
    if (after_step_) after_step_();
  }
  std::chrono::nanoseconds window = rule_.interval;
  if (rule_.kind != StepRule::Kind::kInterval) {
    window = runSizedWindow(now - started_);
  }
  next_window_ = now + window;
}

std::string StepBoundary::description() const {
  std::string steps = " (" + std::to_string(steps_taken_) + " steps";
  if (relearned_ > 0) {
    steps += "; a loop found earlier stopped repeating " + std::to_string(relearned_) +
             (relearned_ == 1 ? " time" : " times") + " and was learned again";
  }
  steps += ")";
  switch (rule_.kind) {
    case StepRule::Kind::kOn:
      return "memseal run: one step per outermost call of " + rule_.name + " (--step-on)" + steps;
    case StepRule::Kind::kInterval:
      return "memseal run: steps are time windows of " + durationText(rule_.interval) +
             " (--interval)" + steps;
    case StepRule::Kind::kAuto:
      break;
  }
  if (phase_.load() == Phase::kLearning) {
    return "memseal run: the program ended before its loop was found (" +
           std::to_string(ops_seen_) +
           " outermost ops seen: too few iterations, or ops that never repeat exactly); --interval "
           "DURATION "
           "or --step-on NAME sets the steps" +
           steps;
  }
  return "memseal run: " + decision_ + steps;
}

}  // namespace memseal::inject
