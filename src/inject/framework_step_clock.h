// Which of a Python program's own step signals ends its steps, for `memseal run`: PyTorch's
// machinery says when an iteration is over better than any guess from op sequences. Three sources,
// seen through PyTorch's own hooks (src/inject/python/step_hooks.py):
//   optimizer  an optimizer's step() returned (torch.optim's global step hooks; an LBFGS closure
//              runs inside one step);
//   loader     a batch was asked of a DataLoader (the previous iteration is over);
//   module     a call of the outermost nn.Module began (modules called inside it do not count).
// A loop inside the step (time steps, layers, micro-batches, beam search) makes none of these, so
// it is never taken for the step.
//
// The clock is one source and one object (an optimizer, a loader's dataset, a module). The first
// clock is an optimizer at once, or a loader or module after kMinSignalsToTakeOver signals; what
// ran before it joins its first step. An optimizer outranks a loader, which outranks a module: a
// higher-ranked source takes the clock at once, ending the step. A
// source of the same or a lower rank takes it only once the clock, having ticked, has been silent
// for more of its signals than it ever gave between two ticks (a second optimizer of a GAN, a
// loader whose batches are accumulated, never do; an evaluation loader after training does). Each
// change of clock starts a phase of the leak detector's steps. Pure: no locks, no clock of time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memseal::inject {

enum class StepSignal : std::uint8_t { kModuleCall = 0, kLoaderBatch = 1, kOptimizerStep = 2 };

// One signal: its source, the object that gave it (Python's id()), and that object's name as a
// person would say it ("SGD", "DataLoader over MNIST", "Net").
struct StepEvent {
  StepSignal signal = StepSignal::kModuleCall;
  std::uint64_t object = 0;
  std::string name;
};

struct ClockDecision {
  bool end_step = false;
  // The detector's phase from now on, when the clock changed (a step ended now is the old
  // phase's; the first clock ends none); empty: unchanged.
  std::string new_phase;
};

class FrameworkStepClock {
 public:
  ClockDecision onEvent(const StepEvent& event);

  // What ended the steps, one entry per clock the run had, in order: its phase name, a sentence
  // saying what a step was, and the steps it ended.
  struct ClockUse {
    std::string phase;
    std::string step_is;
    std::uint64_t steps = 0;
  };
  const std::vector<ClockUse>& uses() const { return uses_; }
  // The index in uses() of the clock now; none before the first.
  std::optional<std::size_t> currentUse() const {
    return clock_ ? std::optional<std::size_t>(current_use_) : std::nullopt;
  }

  // A signal of another object takes the clock after this many in a row at least.
  static constexpr std::uint32_t kMinSignalsToTakeOver = 3;

 private:
  using Key = std::pair<StepSignal, std::uint64_t>;
  struct Rival {
    std::uint32_t since_tick = 0;  // its signals since the clock last ticked
    std::uint32_t most_per_tick = 0;
  };
  void takeClock(const StepEvent& event, ClockDecision& decision);

  std::optional<Key> clock_;
  std::uint64_t clock_ticks_ = 0;  // since it took the clock
  std::map<Key, Rival> rivals_;
  std::map<Key, std::string> phase_names_;  // a phase per object: one that comes back resumes it
  std::vector<ClockUse> uses_;
  std::size_t current_use_ = 0;
};

// "SGD.step()", "batches of DataLoader over MNIST", "calls of Net": what one step is.
std::string stepDescription(const StepEvent& event);

}  // namespace memseal::inject
