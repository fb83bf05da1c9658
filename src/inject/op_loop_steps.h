// The default step source of `memseal run` (step_source.h): the op-loop finder (op_loop_finder.h)
// learns the loops of the program's outermost ops, with no steps meanwhile (start-up would look
// like growth); once a loop is found, a step ends at each call of the op that starts its iteration,
// and each loop is a phase of the leak detector's steps. Once a loop's iterations each make the
// same number of allocations, its steps are counted (counted_loop_steps.h). Where no loop is found,
// time windows sized to the run (time_windows.h), while the ops are still looked at for a loop
// found before that runs again.
//
// This class makes the finder's decisions (the detector's steps and phases, the op callback); the
// finder decides, and what the steps mean is the detector's. Ops come on the program's threads
// (OpCallback); the runtime's own thread calls tick() for windows and for learning's time limit.
// In a Python program, the program's own steps take over (FrameworkSteps calls handOver).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inject/counted_loop_steps.h"
#include "inject/op_callback.h"
#include "inject/op_loop_finder.h"
#include "inject/op_loop_step_counts.h"
#include "inject/step_source.h"
#include "inject/time_windows.h"

namespace memseal::inject {

class OpLoopSteps final : public StepSource, private OpListener, private CountedLoopSteps::Host {
 public:
  // `watch_ops_automatically_while_counting`: while steps are counted, the detector watches ops
  // automatically (CountedLoopSteps), the user having not chosen which steps' ops it watches.
  OpLoopSteps(StepLedger& ledger, bool watch_ops_automatically_while_counting);
  ~OpLoopSteps() override;

  std::vector<report::StepsTaken> stepsTaken() override;
  std::vector<std::pair<std::string, double>> iterationsPerStep() override;
  // No more steps here, the op callback removed, counting stopped, and every step's ops watched
  // (unless the user chose which).
  void handOver() override;
  std::chrono::nanoseconds untilNextTick() const override;
  void tick() override;
  // The allocator hook's handler while the loop's steps are counted (track::CountedStepHandler).
  std::uint64_t onCountedBoundary() { return counted_.onBoundary(); }

 private:
  // What the source does now (its mode; the detector's phases are the loops'). kSwitching: a thread
  // decided a change of the detector's phase and makes it (applyPhaseChange); other threads' ops
  // are not looked at meanwhile.
  enum class Mode : std::uint8_t { kLearning, kOps, kWindows, kSwitching, kStopped };
  using Clock = std::chrono::steady_clock;

  // OpListener: every op of every thread; only outermost ones count.
  void onOp(const char* name, bool outermost) override;
  // An outermost op while a loop is followed.
  void onOpInLoop(const char* name);

  // Makes the finder's decision change_ once learn_mutex_ is released (the GIL, then the step
  // lock, as every step is taken).
  void applyPhaseChange(bool on_runtime_thread);
  // With learn_mutex_ held: keeps the finder's decision for applyPhaseChange (the mode is
  // kSwitching until then); whether there was one.
  bool decided(std::optional<OpLoopFinder::Decision> decision);
  // While a loop is followed: the finder checks the op (of the loop's thread only); whether it
  // decided that the loop ended.
  bool checkLoopStillRepeats(const char* name);
  void takeStep();
  // The step itself, under the step lock; false when it was not taken. `iterations`: the loop's
  // iterations it ends (a counted step ends several).
  bool stepLocked(Clock::time_point now, bool coalesce, Mode expected,
                  std::uint64_t iterations = 1);
  void tickWindow();

  // CountedLoopSteps::Host.
  bool takeCountedStep(Clock::time_point now, std::uint64_t iterations) override;
  void afterCountedStep() override;
  bool followingLoop() const override;
  bool loopSettled() override;
  void judgeLoopAfresh() override;
  void setOpCallbackInstalled(bool installed) override { callback_.setInstalled(installed); }
  Clock::duration minStepGap() override;
  void watchOps(OpWatching watching) override;

  StepLedger& ledger_;
  std::atomic<Mode> mode_{Mode::kLearning};
  TimeWindows windows_{std::chrono::nanoseconds::zero(), Clock::now()};  // sized to the run
  OpLoopStepCounts counts_;                                              // under the ledger's lock
  // The loop of kOps, written while the mode is kSwitching (by the one thread that switches) and
  // read after kOps is seen; the thread it runs on, where its steps are taken.
  std::size_t current_ = 0;
  std::atomic<std::uint64_t> loop_thread_{0};

  // The op-loop finder, under learn_mutex_, and the decision it made last.
  std::mutex learn_mutex_;
  OpLoopFinder finder_;
  OpLoopFinder::Decision change_;
  std::size_t loops_size_ = 0;  // the finder's loops, for applyPhaseChange (no learn lock)
  std::string anchor_;          // the op a step ends at (kOps); read without learn_mutex_
  std::mutex anchor_mutex_;     // guards anchor_ against a decision on another thread

  CountedLoopSteps counted_{*this};
  OpCallback callback_{*this};
};

}  // namespace memseal::inject
