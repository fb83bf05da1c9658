#include "inject/op_loop_steps.h"

#include <algorithm>

#include "inject/python_lock.h"
#include "inject/step_ledger.h"
#include "inject/step_tuning.h"
#include "inject/time_scale.h"
#include "track/counted_steps.h"
#include "track/memory_counters.h"
#include "track/op_sampling.h"

namespace memseal::inject {

namespace {

std::atomic<OpLoopSteps*> g_op_loop_steps{nullptr};

// The allocator hook's handler (track::CountedStepHandler) while a loop's steps are counted.
std::uint64_t onCountedStep();

}  // namespace

OpLoopSteps::OpLoopSteps(StepLedger& ledger, bool watch_ops_automatically_while_counting)
    : ledger_(ledger),
      finder_(OpLoopFinder::TimeLimits{scaledByTimeScale(kMaxLearning),
                                       scaledByTimeScale(kMaxLearningWithFewOps)}) {
  // No steps while the loop is learned: start-up (imports, loading a model) would look like
  // growth. Learning a loop takes a few dozen iterations.
  if (watch_ops_automatically_while_counting) counted_.watchOpsAutomaticallyWhileCounting();
  g_op_loop_steps.store(this, std::memory_order_release);
  track::setCountedStepHandler(&onCountedStep);
  callback_.setInstalled(true);
}

OpLoopSteps::~OpLoopSteps() {
  track::setCountedStepHandler(nullptr);
  g_op_loop_steps.store(nullptr, std::memory_order_release);
}

namespace {

std::uint64_t onCountedStep() {
  OpLoopSteps* steps = g_op_loop_steps.load(std::memory_order_acquire);
  return steps != nullptr ? steps->onCountedBoundary() : 0;
}

}  // namespace

void OpLoopSteps::onOp(const char* name, bool outermost) {
  if (!outermost || ledger_.stopped()) return;
  switch (mode_.load(std::memory_order_acquire)) {
    case Mode::kLearning: {
      bool changed;
      {
        std::lock_guard<std::mutex> lock(learn_mutex_);
        if (mode_.load() != Mode::kLearning) return;
        changed = decided(
            finder_.learn(name, threadNumber(), track::cpuCounters().liveBytes(), Clock::now()));
      }
      if (changed) applyPhaseChange(false);
      return;
    }
    case Mode::kOps:
      onOpInLoop(name);
      return;
    case Mode::kWindows: {
      // Loops found before may run again.
      bool changed = false;
      {
        std::lock_guard<std::mutex> lock(learn_mutex_);
        std::uint64_t thread = numberOfThisThreadIfAny();
        if (mode_.load() != Mode::kWindows || thread == 0) return;
        changed = decided(finder_.recogniseInWindows(name, thread));
      }
      if (changed) applyPhaseChange(false);
      return;
    }
    case Mode::kSwitching:
    case Mode::kStopped:
      return;
  }
}

void OpLoopSteps::onOpInLoop(const char* name) {
  std::uint64_t thread = numberOfThisThreadIfAny();
  // While steps are counted, only the anchor is looked at (a check of the count).
  if (thread != 0 && !counted_.counting() && checkLoopStillRepeats(name)) {
    applyPhaseChange(false);
    return;
  }
  // Only on the loop's own thread: an op of the same name on one of libtorch's intra-op workers is
  // not an iteration.
  if (thread == 0 || thread != loop_thread_.load(std::memory_order_acquire)) return;
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
  if (mode_.load(std::memory_order_acquire) != Mode::kOps) return;
  Clock::time_point now = Clock::now();
  bool count = counted_.countIterationAllocations(now);
  takeStep();
  if (count && mode_.load(std::memory_order_acquire) == Mode::kOps) counted_.start(now);
}

void OpLoopSteps::applyPhaseChange(bool on_runtime_thread) {
  PythonLock python(on_runtime_thread ? PythonLock::Threads::kAny
                                      : PythonLock::Threads::kPythonOnly);
  std::lock_guard<std::mutex> steps(ledger_.mutex());
  if (mode_.load() != Mode::kSwitching) return;  // handed over meanwhile
  OpLoopFinder::Decision change = change_;
  // Steps already taken that were the new phase's, and the one running now, join it first.
  if (change.phase_first && !change.detector_phase.empty()) {
    ledger_.phaseLocked(change.detector_phase, static_cast<std::uint32_t>(change.steps_back));
    counts_.moveOutOfLoop(current_, change.steps_back);
  }
  if (change.end_step && counts_.taken() > 0 && ledger_.takeLocked(Clock::now(), false)) {
    counts_.stepTaken(std::nullopt);
  }
  if (!change.phase_first && !change.detector_phase.empty()) {
    ledger_.phaseLocked(change.detector_phase);
  }
  Mode next = Mode::kLearning;
  switch (change.next) {
    case OpLoopFinder::Decision::Next::kFollowLoop:
      next = Mode::kOps;
      current_ = change.loop;
      counts_.loopsFound(loops_size_);
      loop_thread_.store(change.loop_thread, std::memory_order_release);
      break;
    case OpLoopFinder::Decision::Next::kWindows:
      next = Mode::kWindows;
      windows_.endNextAt(Clock::now() + kShortestWindow);
      break;
    case OpLoopFinder::Decision::Next::kLearning:
      break;
  }
  mode_.store(next, std::memory_order_release);
}

bool OpLoopSteps::decided(std::optional<OpLoopFinder::Decision> decision) {
  if (!decision) return false;
  change_ = std::move(*decision);
  loops_size_ = finder_.loops().size();
  if (change_.next == OpLoopFinder::Decision::Next::kFollowLoop) {
    std::lock_guard<std::mutex> lock(anchor_mutex_);
    anchor_ = finder_.anchorName();
  }
  // Without a loop found, time windows for good: the op callback is no longer needed.
  if (!change_.ops_needed) callback_.setInstalled(false);
  mode_.store(Mode::kSwitching, std::memory_order_release);
  return true;
}

bool OpLoopSteps::checkLoopStillRepeats(const char* name) {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  if (mode_.load() != Mode::kOps) return false;
  OpLoopFinder::LoopCheck check =
      finder_.checkLoopStillRepeats(name, threadNumber(), counts_.seen());
  if (check.anchor_moved) {
    std::lock_guard<std::mutex> anchor(anchor_mutex_);
    anchor_ = finder_.anchorName();
  }
  return decided(std::move(check.decision));
}

void OpLoopSteps::handOver() {
  {
    std::lock_guard<std::mutex> lock(ledger_.mutex());
    // A phase change decided meanwhile finds the mode no longer kSwitching and is dropped.
    mode_.store(Mode::kStopped, std::memory_order_release);
    counts_.handOver();
    counted_.stopForGood();
    if (counted_.opsFollowCounting()) {
      // The program's steps are one iteration each, so the allocations of unwatched steps are
      // replayed against the last watched one, as under the API's default: watching every step's
      // ops cost a training loop of small ops half its time again.
      track::setReplayIterationLength(0);
      ledger_.watchOpsLocked(OpWatching::automatic());
    }
  }
  // A thread still counting finds the mode stopped at its next boundary and counts no more.
  callback_.setInstalled(false);
}

bool OpLoopSteps::stepLocked(Clock::time_point now, bool coalesce, Mode expected,
                             std::uint64_t iterations) {
  std::lock_guard<std::mutex> lock(ledger_.mutex());
  Mode mode = mode_.load();
  // The mode the caller saw may have changed while it waited for the GIL or this lock.
  if (mode != expected) return false;
  bool in_loop = mode == Mode::kOps && counts_.knows(current_);
  if (in_loop) counts_.iterated(current_, iterations);
  if (!ledger_.takeLocked(now, coalesce && counts_.taken() > 0)) return false;
  counts_.stepTaken(in_loop ? std::optional<std::size_t>(current_) : std::nullopt);
  return true;
}

bool OpLoopSteps::takeCountedStep(Clock::time_point now, std::uint64_t iterations) {
  PythonLock python(PythonLock::Threads::kPythonOnly);
  return stepLocked(now, false, Mode::kOps, iterations);
}

void OpLoopSteps::afterCountedStep() { ledger_.afterStep(); }

bool OpLoopSteps::followingLoop() const {
  return mode_.load(std::memory_order_acquire) == Mode::kOps && !ledger_.stopped();
}

bool OpLoopSteps::loopSettled() {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  return finder_.settled();
}

void OpLoopSteps::judgeLoopAfresh() {
  std::lock_guard<std::mutex> lock(learn_mutex_);
  finder_.judgeAfresh();
}

OpLoopSteps::Clock::duration OpLoopSteps::minStepGap() { return ledger_.minGap(); }

void OpLoopSteps::watchOps(OpWatching watching) {
  std::lock_guard<std::mutex> lock(ledger_.mutex());
  ledger_.watchOpsLocked(watching);
}

void OpLoopSteps::takeStep() {
  bool taken;
  {
    // The detector writes down findings at some steps, naming Python frames.
    PythonLock python(PythonLock::Threads::kPythonOnly);
    taken = stepLocked(Clock::now(), true, Mode::kOps);
  }
  if (taken) ledger_.afterStep();
}

std::chrono::nanoseconds OpLoopSteps::untilNextTick() const {
  if (mode_.load() != Mode::kWindows) return scaledByTimeScale(kLearningTick);
  return windows_.untilEnd(Clock::now());
}

void OpLoopSteps::tick() {
  if (mode_.load() == Mode::kOps) counted_.stopWhenQuiet();
  if (mode_.load() == Mode::kLearning) {
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(learn_mutex_);
      if (mode_.load() == Mode::kLearning) {
        changed = decided(finder_.decideIfTimeIsUp(Clock::now()));
      }
    }
    if (changed) applyPhaseChange(true);
  }
  if (mode_.load() == Mode::kWindows) tickWindow();
}

void OpLoopSteps::tickWindow() {
  Clock::time_point now = Clock::now();
  if (windows_.check(now, memoryActivity()) != TimeWindows::Window::kStep) return;
  bool taken;
  {
    PythonLock python;
    taken = stepLocked(now, false, Mode::kWindows);
  }
  // Not taken: the mode changed meanwhile (a loop found again), and the windows wait for the next.
  if (!taken) return;
  ledger_.afterStep();
  windows_.next(now);
}

std::vector<std::pair<std::string, double>> OpLoopSteps::iterationsPerStep() {
  std::lock_guard<std::mutex> learn(learn_mutex_);
  std::lock_guard<std::mutex> lock(ledger_.mutex());
  return counts_.iterationsPerStep(finder_.loops());
}

std::vector<report::StepsTaken> OpLoopSteps::stepsTaken() {
  std::lock_guard<std::mutex> learn(learn_mutex_);
  std::lock_guard<std::mutex> lock(ledger_.mutex());
  FoundLoops found;
  found.loops = &finder_.loops();
  for (const OpLoopFinder::Loop& loop : finder_.loops()) {
    found.anchor_names.push_back(finder_.opName(loop.anchor));
  }
  found.windows_because = finder_.windowsBecause();
  found.ops_when_windows_began = finder_.opsWhenWindowsBegan();
  found.ops_seen = finder_.opsSeen();
  found.in_windows = mode_.load() == Mode::kWindows;
  found.counted_steps = counted_.stepsCounted();
  found.allocations_per_iteration = counted_.allocationsPerIteration();
  return {counts_.stepsTaken(found)};
}

}  // namespace memseal::inject
