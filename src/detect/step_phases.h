// The phases of a program's steps: a training loop, the validation pass after it, the test pass at
// the end, or whatever loops a program runs in turn. Every step belongs to one phase, named by the
// caller (LeakDetector::phase) or by memseal run's loop finder; a program that names none has one.
// Survivors are judged against the steps of the phases they were made in, so a leak in a phase
// that is a tenth of the run is still most of its own steps, and a phase that makes nothing does
// not dilute one that leaks. Pure: no libtorch, no globals.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memseal::detect {

// A set of phases as bits (phase p is bit min(p, 63)): programs have a handful of phases; past 63
// they share the last bit, which only makes the judgement look at more steps.
using PhaseSet = std::uint64_t;
inline PhaseSet phaseBit(std::uint32_t phase) { return PhaseSet{1} << (phase < 63 ? phase : 63); }

class StepPhases {
 public:
  // Past this many runs (a phase begun again counts as a run), later steps stay in the phase of the
  // last run: memory stays bounded however often a program switches.
  static constexpr std::size_t kMaxRuns = 1 << 16;
  // Backward seen on steps at most this far apart in one run is taken to have run between them.
  static constexpr std::uint32_t kBackwardGapSteps = 64;
  static constexpr std::size_t kMaxBackwardStretches = 8192;

  StepPhases();

  // The steps from `step` on belong to the phase named `name` ("" is the unnamed phase every run
  // starts in); a name seen before keeps its number. `step` may be before the start of the last
  // run: later steps change phase (a program that knows where a phase began only a few steps
  // after). Returns the phase's number.
  std::uint32_t begin(std::uint32_t step, const std::string& name);
  // Whether `step` is in the first run of its phase.
  bool inFirstRunOfItsPhase(std::uint32_t step) const;
  std::uint32_t phaseOf(std::uint32_t step) const;
  // The first step of the run of steps (of one phase, without a break) that holds `step`.
  std::uint32_t runStartOf(std::uint32_t step) const { return runs_[runIndexOf(step)].first_step; }
  // Whether the steps changed phase: otherwise every judgement is over all steps, as without
  // phases. (Runs next to each other always differ in phase.)
  bool several() const { return runs_.size() > 1; }
  std::size_t phaseCount() const { return names_.size(); }
  const std::string& name(std::uint32_t phase) const { return names_.at(phase); }
  bool runsLimited() const { return runs_limited_; }

  // The phases of these steps.
  PhaseSet phasesOf(const std::vector<std::uint32_t>& steps) const;
  // The phase most of these steps belong to.
  std::uint32_t mainPhaseOf(const std::vector<std::uint32_t>& steps) const;
  // Steps of `phases` in [first, last].
  std::uint32_t stepsIn(PhaseSet phases, std::uint32_t first, std::uint32_t last) const;
  // Each of `steps` (sorted, in [first, last]) as its position among the steps of `phases` in
  // [first, last]; steps of other phases are left out.
  std::vector<std::uint32_t> positionsOf(const std::vector<std::uint32_t>& steps, PhaseSet phases,
                                         std::uint32_t first, std::uint32_t last) const;

  // Backward ran during `step` (it ran only on steps whose ops were watched, as far as memseal
  // can tell): per phase, for the category of what it retains.
  void markBackward(std::uint32_t step);
  bool backwardRan(PhaseSet phases) const;
  // Whether backward ran in most of these steps (sorted).
  bool backwardRanInMostOf(const std::vector<std::uint32_t>& steps) const;

  struct Summary {
    std::string name;
    std::uint32_t first_step = 0;
    std::uint32_t steps = 0;  // of the steps before `end`
    std::uint32_t runs = 0;
    bool backward_ran = false;
  };
  // The phases with steps before `end` (the step now running), in order of their first step.
  std::vector<Summary> summaries(std::uint32_t end) const;

 private:
  struct Run {
    std::uint32_t first_step = 0;
    std::uint32_t phase = 0;
  };
  // The run holding `step`: the last one that starts at or before it.
  std::size_t runIndexOf(std::uint32_t step) const;

  std::vector<Run> runs_;
  std::vector<std::string> names_;
  // Stretches of steps [first, last] during which backward ran, in order: by step rather than by
  // phase, so steps relabelled later keep what they did.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> backward_steps_;
  bool runs_limited_ = false;
};

}  // namespace memseal::detect
