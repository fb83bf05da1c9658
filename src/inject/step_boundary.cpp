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
#include "inject/step_boundary_tuning.h"
#include "inject/time_scale.h"
#include "track/counted_steps.h"
#include "track/device_events.h"
#include "track/memory_counters.h"
#include "track/op_observer.h"
#include "track/op_sampling.h"

namespace memseal::inject {

namespace {

std::atomic<StepBoundary*> g_boundary{nullptr};
thread_local int t_op_depth = 0;
std::atomic<std::uint64_t> g_next_thread{1};
thread_local std::uint64_t t_thread = 0;  // numbered on first use (threadNumber)

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

std::uint64_t onCountedStep() {
  StepBoundary* boundary = g_boundary.load(std::memory_order_acquire);
  return boundary != nullptr ? boundary->onCountedBoundary() : 0;
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

std::uint64_t threadNumber() {
  if (t_thread == 0) t_thread = g_next_thread.fetch_add(1);
  return t_thread;
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
    : rule_(std::move(rule)),
      detector_(detector),
      after_step_(std::move(after_step)),
      finder_(OpLoopFinder::TimeLimits{scaledByTimeScale(kMaxLearning),
                                       scaledByTimeScale(kMaxLearningWithFewOps)}) {
  switch (rule_.kind) {
    case StepRule::Kind::kAuto:
      // No steps while the loop is learned: start-up (imports, loading a model) would look like
      // growth. Learning a loop takes a few dozen iterations.
      phase_ = Phase::kLearning;
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
  if (rule_.kind == StepRule::Kind::kAuto) track::setCountedStepHandler(&onCountedStep);
  setCallbackInstalled(true);
}

StepBoundary::~StepBoundary() {
  track::setCountedStepHandler(nullptr);
  g_boundary.store(nullptr, std::memory_order_release);
  setCallbackInstalled(false);
}

void StepBoundary::setCallbackInstalled(bool installed) {
  std::lock_guard<std::mutex> lock(callback_mutex_);
  if (installed && callback_ == 0) {
    // Outermost ops only need their names: no inputs, no outputs.
    callback_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&onOpStart, &onOpEnd)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::TORCHSCRIPT_FUNCTION,
                     at::RecordScope::USER_SCOPE}));
    track::noteRecordFunctionCallback(track::kLoopFinderCallback, true);
  } else if (!installed && callback_ != 0) {
    // An op already running keeps its own copy of the callbacks: its end still comes.
    at::removeCallback(callback_);
    callback_ = 0;
    track::noteRecordFunctionCallback(track::kLoopFinderCallback, false);
  }
}

void StepBoundary::onOp(const char* name, bool outermost) {
  if (!outermost) return;
  switch (phase_.load(std::memory_order_acquire)) {
    case Phase::kLearning: {
      bool changed;
      {
        std::lock_guard<std::mutex> lock(learn_mutex_);
        if (phase_.load() != Phase::kLearning) return;
        changed = decided(
            finder_.learn(name, threadNumber(), track::cpuCounters().liveBytes(), Clock::now()));
      }
      if (changed) applyPhaseChange(false);
      return;
    }
    case Phase::kOps: {
      if (rule_.kind == StepRule::Kind::kOn) {
        if (stepNameMatches(name, anchor_)) takeStep();
        return;
      }
      // While steps are counted, only the anchor is looked at (a check of the count).
      if (t_thread != 0 && !counted_.counting() && checkLoopStillRepeats(name)) {
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
      if (!anchor) return;
      if (counted_.counting()) {
        counted_.checkAnchor();
        return;
      }
      if (phase_.load(std::memory_order_acquire) != Phase::kOps) return;
      Clock::time_point now = Clock::now();
      bool count = counted_.countIterationAllocations(now);
      takeStep();
      if (count && phase_.load(std::memory_order_acquire) == Phase::kOps) counted_.start(now);
      return;
    }
    case Phase::kWindows: {
      if (rule_.kind != StepRule::Kind::kAuto) return;
      // Loops found before may run again.
      bool changed = false;
      {
        std::lock_guard<std::mutex> lock(learn_mutex_);
        if (phase_.load() != Phase::kWindows || t_thread == 0) return;
        changed = decided(finder_.recogniseInWindows(name, t_thread));
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
  OpLoopFinder::Decision change = change_;
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
  Phase next = Phase::kLearning;
  switch (change.next) {
    case OpLoopFinder::Decision::Next::kFollowLoop:
      next = Phase::kOps;
      current_ = change.loop;
      loop_steps_.resize(loops_size_, 0);
      loop_iterations_.resize(loops_size_, 0);
      loop_thread_.store(change.loop_thread, std::memory_order_release);
      break;
    case OpLoopFinder::Decision::Next::kWindows:
      next = Phase::kWindows;
      next_window_.store(Clock::now() + kShortestWindow);
      break;
    case OpLoopFinder::Decision::Next::kLearning:
      break;
  }
  phase_.store(next, std::memory_order_release);
}

bool StepBoundary::decided(std::optional<OpLoopFinder::Decision> decision) {
  if (!decision) return false;
  change_ = std::move(*decision);
  loops_size_ = finder_.loops().size();
  if (change_.next == OpLoopFinder::Decision::Next::kFollowLoop) {
    std::lock_guard<std::mutex> lock(anchor_mutex_);
    anchor_ = finder_.anchorName();
  }
  // Without a loop found, time windows for good: the op callback is no longer needed.
  if (!change_.ops_needed) setCallbackInstalled(false);
  phase_.store(Phase::kSwitching, std::memory_order_release);
  return true;
}

bool StepBoundary::checkLoopStillRepeats(const char* name) {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  if (phase_.load() != Phase::kOps) return false;
  OpLoopFinder::LoopCheck check = finder_.checkLoopStillRepeats(
      name, threadNumber(), steps_seen_.load(std::memory_order_relaxed));
  if (check.anchor_moved) {
    std::lock_guard<std::mutex> anchor(anchor_mutex_);
    anchor_ = finder_.anchorName();
  }
  return decided(std::move(check.decision));
}

void StepBoundary::handOver() {
  {
    std::lock_guard<std::mutex> lock(step_mutex_);
    // A phase change decided meanwhile finds the phase no longer kSwitching and is dropped.
    phase_.store(Phase::kStopped, std::memory_order_release);
    handed_over_ = true;
    counted_.stopForGood();
    if (counted_.opsFollowCounting()) {
      // The program's steps are one iteration each, so the allocations of unwatched steps are
      // replayed against the last watched one, as under the API's default: watching every step's
      // ops cost a training loop of small ops half its time again.
      track::setReplayIterationLength(0);
      detector_.watchOps(OpWatching::automatic());
    }
  }
  // A thread still counting finds the phase stopped at its next boundary and counts no more.
  setCallbackInstalled(false);
}

void StepBoundary::onNamedScope(const char* name) {
  if (rule_.kind == StepRule::Kind::kOn && phase_.load(std::memory_order_acquire) == Phase::kOps &&
      stepNameMatches(name, anchor_)) {
    takeStep();
  }
}

bool StepBoundary::stepLocked(Clock::time_point now, bool coalesce, Phase expected,
                              std::uint64_t iterations) {
  std::lock_guard<std::mutex> lock(step_mutex_);
  Phase phase = phase_.load();
  // The phase the caller saw may have changed while it waited for the GIL or this lock.
  if (phase != expected) return false;
  bool in_loop = phase == Phase::kOps && rule_.kind == StepRule::Kind::kAuto &&
                 current_ < loop_iterations_.size();
  if (in_loop) loop_iterations_[current_] += iterations;
  if (coalesce && steps_taken_ > 0 && now - last_step_ < step_cost_.minGap()) return false;
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
  step_cost_.add(Clock::now() - now);
  return true;
}

bool StepBoundary::takeCountedStep(Clock::time_point now, std::uint64_t iterations) {
  PythonLock python(PythonLock::Threads::kPythonOnly);
  return stepLocked(now, false, Phase::kOps, iterations);
}

void StepBoundary::afterCountedStep() {
  if (after_step_) after_step_();
}

bool StepBoundary::followingLoop() const {
  return phase_.load(std::memory_order_acquire) == Phase::kOps;
}

bool StepBoundary::loopSettled() {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  return finder_.settled();
}

void StepBoundary::judgeLoopAfresh() {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  finder_.judgeAfresh();
}

StepBoundary::Clock::duration StepBoundary::minStepGap() {
  std::lock_guard<std::mutex> lock(step_mutex_);
  return step_cost_.minGap();
}

void StepBoundary::watchOps(OpWatching watching) {
  std::lock_guard<std::mutex> lock(step_mutex_);
  detector_.watchOps(watching);
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
  if (phase != Phase::kWindows) return scaledByTimeScale(kLearningTick);
  std::chrono::nanoseconds left = next_window_.load() - Clock::now();
  return std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0));
}

void StepBoundary::tick() {
  if (phase_.load() == Phase::kOps) counted_.stopWhenQuiet();
  if (phase_.load() == Phase::kLearning) {
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(learn_mutex_);
      if (phase_.load() == Phase::kLearning) {
        changed = decided(finder_.decideIfTimeIsUp(Clock::now()));
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

std::vector<std::pair<std::string, double>> StepBoundary::iterationsPerStep() {
  std::lock_guard<std::mutex> learn(learn_mutex_);
  std::lock_guard<std::mutex> lock(step_mutex_);
  std::vector<std::pair<std::string, double>> ratios;
  const std::vector<OpLoopFinder::Loop>& loops = finder_.loops();
  for (std::size_t i = 0; i < loops.size() && i < loop_steps_.size(); ++i) {
    if (loop_steps_[i] == 0 || loop_iterations_[i] <= loop_steps_[i]) continue;
    ratios.emplace_back(loops[i].name, static_cast<double>(loop_iterations_[i]) /
                                           static_cast<double>(loop_steps_[i]));
  }
  return ratios;
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
  const std::vector<OpLoopFinder::Loop>& loops = finder_.loops();
  const std::string& windows = finder_.windowsDecision();
  // The program's own signals took over: what was guessed before them, if anything, is history.
  if (handed_over_ && steps_taken_ == 0) return {};
  if (handed_over_) {
    return {"memseal run: " + std::to_string(steps_taken_) +
            " steps came before the program's own, from " +
            (loops.empty() ? std::string("time windows") : "loops found in its ops")};
  }
  std::vector<std::string> lines;
  if (loops.empty()) {
    if (phase_.load() == Phase::kWindows) return {"memseal run: " + windows + steps};
    return {"memseal run: the program ended before its loop was found (" +
            std::to_string(finder_.opsSeen()) +
            " outermost ops seen: too few iterations, or ops that never repeat); --interval "
            "DURATION or --step-on NAME sets the steps" +
            steps};
  }
  std::string summary = "memseal run: " + std::to_string(steps_taken_) + " steps in " +
                        std::to_string(loops.size()) + (loops.size() == 1 ? " loop" : " loops") +
                        " found in the program's ops";
  if (steps_outside_loops_ > 0) {
    summary += ", and " + std::to_string(steps_outside_loops_) +
               " outside them (start-up, between loops" +
               (windows.empty() ? std::string(")") : ", time windows)");
  }
  lines.push_back(summary);
  for (std::size_t i = 0; i < loops.size(); ++i) {
    const OpLoopFinder::Loop& loop = loops[i];
    std::uint64_t loop_steps = i < loop_steps_.size() ? loop_steps_[i] : 0;
    std::uint64_t iterations = i < loop_iterations_.size() ? loop_iterations_[i] : 0;
    std::string together =
        iterations > loop_steps
            ? " (" + std::to_string(iterations) +
                  " iterations: those closer together than a step costs were one step)"
            : "";
    lines.push_back("memseal run: " + loop.name + ": one step per call of " +
                    finder_.opName(loop.anchor) + ", the op that starts each of its iterations (" +
                    std::to_string(loop.period) + " ops, found after " +
                    std::to_string(loop.found_after) + " ops): " + std::to_string(loop_steps) +
                    " steps in " + std::to_string(loop.runs) + (loop.runs == 1 ? " run" : " runs") +
                    together);
  }
  if (std::uint64_t counted = counted_.stepsCounted(); counted > 0) {
    lines.push_back("memseal run: " + std::to_string(counted) +
                    " of these steps were ended by counting the loop's allocations (" +
                    std::to_string(counted_.allocationsPerIteration()) +
                    " an iteration) instead of following every op, checked against the op "
                    "that starts each iteration every " +
                    std::to_string(kCountedStepsBetweenChecks) + " steps");
  }
  if (!windows.empty() && phase_.load() == Phase::kWindows) {
    lines.push_back("memseal run: then " + windows);
  }
  return lines;
}

}  // namespace memseal::inject
