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
// The clock is one source and one object (an optimizer, a loader's dataset, a module); it says
// which iterations are steps, and a step ends where the next iteration begins after its tick: at
// the batch of a loader that gives one per tick, else at the first model call that comes once per
// tick, else at the first other signal; at the next tick if none came. What a training iteration
// does after its optimizer's step (`total_loss += loss`, `losses.append(loss)`) belongs with the
// forward pass it keeps, and a graph kept that way is seen by the step that made it.
//
// The first clock is an optimizer at once, or a loader or module after kMinSignalsToTakeOver
// signals; what ran before it joins its first step. An optimizer outranks a loader, which outranks
// a module: a higher-ranked source takes the clock at once, ending the step. A source of the same
// or a lower rank takes it only once the clock, having ticked, has been silent for more of its
// signals than it ever gave between two ticks (a second optimizer of a GAN, a loader whose batches
// are accumulated, never do; an evaluation loader after training does). Each change of clock starts
// a phase of the leak detector's steps.
//
// A phase left comes back at the first signal that only ever came with it: the training loader's
// batch, or the training-mode model's call, after an evaluation pass takes training's clock back at
// once, so the first training iteration (its forward and backward, before the optimizer's step) is
// training's, not the last step of the evaluation pass. A signal seen under two clocks (a model
// called in training mode by the evaluation pass too) brings no phase back. Pure: no locks, no
// clock of time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
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
  // The new clock took over after a few of its signals with no tick of the old one among them:
  // the step ending now, begun at the first of them, holds them and is the new phase's first (an
  // evaluation pass's first batches are not training's).
  bool ended_step_is_new_phase = false;
};

class FrameworkStepClock {
 public:
  ClockDecision onEvent(const StepEvent& event);

  // What ended the steps, one entry per clock the run had, in order: its phase name, the signal
  // and the name of the object that gave it, and the steps it ended.
  struct ClockUse {
    std::string phase;
    StepSignal signal = StepSignal::kModuleCall;
    std::string object_name;
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
    std::uint64_t under_clock = 0;    // its signals since the clock was taken
    std::uint32_t regular_ticks = 0;  // the last ticks in a row with exactly one of its signals
    std::uint32_t position = 0;       // where its first signal came among those after the tick
  };
  // A rival that gave one signal per tick this many ticks in a row may begin the iterations.
  static constexpr std::uint32_t kTicksToStart = 2;
  // `event` names the phase when the key has none yet.
  void takeClock(const Key& key, const StepEvent& event, ClockDecision& decision);
  // The clock whose phase the signal brings back, if it only ever came with that clock's.
  std::optional<Key> phaseBroughtBack(const Key& key) const;
  // Counts a rival's signal; whether it is the first under this clock.
  bool noteSignal(const Key& key);
  // The clock's own signal: the rivals' counts per tick, and which of them begins an iteration.
  void tick();

  std::optional<Key> clock_;
  std::uint64_t clock_ticks_ = 0;  // since it took the clock
  bool cut_pending_ = false;       // the clock ticked, and no iteration began since
  // The signal that begins an iteration: a loader giving one batch per tick, else the first model
  // call of each tick (the discriminator's call in a GAN's generator update comes after its
  // optimizer's step, the next batch later: the batch begins the iteration).
  std::optional<Key> starter_;
  std::uint32_t signals_since_tick_ = 0;
  std::map<Key, Rival> rivals_;
  std::map<Key, std::string> phase_names_;  // a phase per object: one that comes back resumes it
  // Signals that came in most steps of a clock left (a training loader's), with that clock.
  std::map<Key, Key> companion_of_;
  std::map<Key, Key> seen_under_;  // the one clock each signal came under so far
  std::set<Key> seen_under_several_;
  std::vector<ClockUse> uses_;
  std::size_t current_use_ = 0;
};

}  // namespace memseal::inject
