// The numbers of `memseal run`'s step sources (step_source.h) and the loop finder's trace: the
// op-loop finder (op_loop_finder.h), its steps (op_loop_steps.h), counted steps, time windows
// (time_windows.h), and the cost of a step (step_cost.h). Internal to src/inject/.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace memseal::inject {

// Time windows sized to the run, for steps (TimeWindows) and forked children (ForkChildWatch):
// the first ones short, so that a run of a few seconds still gets dozens of them; later ones a
// 48th of the time since the start, so that a long run has few and each outlasts an iteration.
constexpr std::chrono::milliseconds kShortestWindow{50};
constexpr int kWindowsPerRun = 48;
inline std::chrono::nanoseconds runSizedWindow(std::chrono::nanoseconds since_start) {
  return std::max<std::chrono::nanoseconds>(kShortestWindow, since_start / kWindowsPerRun);
}

// Learning looks at each thread's ops at checkpoints (128, 192, 288, 432, ... ops: each half again
// as many); a loop is taken when a checkpoint finds one found at an earlier checkpoint (the same
// iteration, from any of its ops: a short phase, a validation pass of twenty batches, is taken
// when it runs again), or one repeated twice kMinRepeats times with nearly every iteration alike;
// learning is given up (time windows go on) at kLastCheckpoint ops or kMaxLearning (see
// kMinOpsBeforeTimeLimit). The decision is then checked iteration by iteration
// (OpLoopFinder::checkLoopStillRepeats).
inline constexpr std::size_t kFirstCheckpoint = 128;
inline constexpr std::size_t kLastCheckpoint = 1 << 16;
inline constexpr std::size_t kMinRepeats = 8;
inline constexpr double kSureCoverage = 0.9;
inline constexpr auto kMaxLearning = std::chrono::seconds(10);
// The time limit counts only once this many ops were seen (or after kMaxLearningWithFewOps): on a
// loaded machine, or where the program prepares its data between loops, 10 s may pass before the
// loop has run often enough to be recognised.
inline constexpr std::size_t kMinOpsBeforeTimeLimit = 8192;
inline constexpr auto kMaxLearningWithFewOps = std::chrono::seconds(60);
inline constexpr auto kLearningTick = std::chrono::milliseconds(100);
// Steps closer than a multiple of what a step costs in the detector (on average) are one step, so
// a loop of microsecond iterations spends about a twentieth of its time there at most: never closer
// than kMinStepGap, and always taken kMaxStepGap apart (a step that wrote down a finding costs far
// more than the usual one).
inline constexpr auto kMinStepGap = std::chrono::microseconds(50);
inline constexpr auto kMaxStepGap = std::chrono::milliseconds(1);
inline constexpr int kStepCostMultiple = 20;
// A loop has ended when fewer than half of its last kJudgedIterations iterations matched, or when
// its anchor has not run for kAbsentPeriods iterations' worth of ops and kAbsentSlack more.
inline constexpr std::uint32_t kJudgedIterations = 8;
inline constexpr std::size_t kAbsentPeriods = 2;
inline constexpr std::size_t kAbsentSlack = 16;
// Loops found at earlier checkpoints, remembered across learnings: one found again is taken.
inline constexpr std::size_t kRememberedCandidates = 8;
// A loop found before runs again after this many of its iterations in a row.
inline constexpr int kRecognisedAfter = 2;
// A loop that ends after fewer than kInnerLoopIterations iterations, and runs again with no other
// loop in between, kInnerLoopRuns times in a row lies inside a longer iteration (a recurrent
// model's time steps, a layer's blocks, the backward pass's nodes of those): the step is that
// iteration, looked for in longer stretches of ops from then on. So does a loop followed whose
// runs of fewer than kInnerLoopIterations matched iterations, of varying lengths, are broken
// kInnerLoopRuns times in a row by a longer iteration (time steps of sequences of several lengths),
// and a loop without backward that runs again kInnerLoopRuns times in a row with backward run
// between its runs (a data loader's loop over a batch's samples): each run of its ops is then one
// op, and the iterations around them are alike.
inline constexpr std::size_t kInnerLoopIterations = 32;
inline constexpr int kInnerLoopRuns = 3;
// Where no loop is found, units of up to kMaxInnerLoopPeriod ops run back to back
// kInnerLoopMinRepeats times or more, in runs of kInnerLoopMinLengths different lengths or more,
// are loops inside a longer iteration too (a first iteration unlike the rest gives two lengths).
inline constexpr std::size_t kMaxInnerLoopPeriod = 16;
inline constexpr std::size_t kInnerLoopMinRepeats = 3;
inline constexpr std::size_t kInnerLoopMinLengths = 3;
// Counted steps (CountedLoopSteps): iterations alike in allocations before counting
// starts, steps between two checks against the anchor, anchors a check needs, and the step
// boundaries a check waits for the anchor before it takes the loop as gone. Counting pays off in
// long loops; a short phase (a validation pass of a few dozen batches) keeps its ops followed,
// so that where it ends, and which steps were its own, stays exact.
inline constexpr std::uint32_t kEqualIterationsToCount = 64;
inline constexpr std::uint32_t kCountedStepsBetweenChecks = 64;
inline constexpr std::uint32_t kAnchorsPerCheck = 2;
inline constexpr std::uint32_t kBoundariesWithoutAnchor = 3;
inline constexpr std::uint64_t kMaxIterationsPerStep = 4096;
// Counted steps come this many times further apart than coalesced ones (kStepCostMultiple).
inline constexpr int kCountedStepGapFactor = 2;
// Where a counted step begins is looked at no more often than this many times what looking costs.
inline constexpr int kPlaceCostMultiple = 100;
// Counting stops when no counted step came for this long, and for kQuietSteps counted steps'
// worth of time.
inline constexpr auto kQuietLoop = std::chrono::seconds(1);
inline constexpr int kQuietSteps = 100;
inline constexpr const char* kOutsideLoops = "outside loops";
inline constexpr std::size_t kMaxOpNames = 4096;
inline constexpr std::uint32_t kOtherOps = std::numeric_limits<std::uint32_t>::max();
// A run of ops of loops that lie inside a longer iteration, seen as one op (OpLoopFinder).
inline constexpr std::uint32_t kInnerLoopRun = kOtherOps - 1;
// The backward pass's ops, as the autograd engine names each node it runs.
inline constexpr const char* kBackwardOpPrefix = "autograd::engine::evaluate_function";

// MEMSEAL_RUN_TRACE_STEPS=1: each decision of the loop finder on stderr, for memseal's developers.
inline bool tracing() {
  static const bool on = [] {
    const char* value = std::getenv("MEMSEAL_RUN_TRACE_STEPS");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return on;
}
inline void trace(const std::string& text) {
  if (tracing()) std::fprintf(stderr, "memseal run [steps]: %s\n", text.c_str());
}
inline constexpr const char* kWindowsPhase = "time windows";

}  // namespace memseal::inject
