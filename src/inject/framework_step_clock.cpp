#include "inject/framework_step_clock.h"

#include <algorithm>

namespace memseal::inject {

namespace {

std::string phaseName(const StepEvent& event) {
  switch (event.signal) {
    case StepSignal::kOptimizerStep:
      return "optimizer steps (" + event.name + ")";
    case StepSignal::kLoaderBatch:
      return "batches (" + event.name + ")";
    case StepSignal::kModuleCall:
      return "calls (" + event.name + ")";
  }
  return event.name;
}

}  // namespace

ClockDecision FrameworkStepClock::onEvent(const StepEvent& event) {
  ClockDecision decision;
  Key key{event.signal, event.object};
  if (!clock_) {
    // The first clock: an optimizer at once; a loader or a module once it has given a few
    // signals with no optimizer step among them (a training program's first batch and first
    // module call come before its first optimizer step, and would be a phase of one step).
    Rival& first = rivals_[key];
    ++first.since_tick;
    if (event.signal == StepSignal::kOptimizerStep || first.since_tick >= kMinSignalsToTakeOver) {
      takeClock(key, event, decision);
      // What ran before is start-up, the first phase's first step: no step of its own.
      decision.end_step = false;
    }
    return decision;
  }
  if (key == *clock_) {
    tick();
    // No signal began an iteration since the last tick (an optimizer whose closure's module calls
    // are inside its step): the step ends at the tick.
    decision.end_step = cut_pending_;
    cut_pending_ = true;
    return decision;
  }
  if (std::optional<Key> back = phaseBroughtBack(key)) {
    takeClock(*back, event, decision);
    cut_pending_ = false;  // this signal began the iteration
    noteSignal(key);
    return decision;
  }
  bool unseen = noteSignal(key);
  if (event.signal > clock_->first) {
    takeClock(key, event, decision);
    return decision;
  }
  // The iteration after a tick begins at its starter's signal, or at a signal never seen under
  // this clock (the next phase's first batch); without a starter, at the first signal.
  if (cut_pending_ && (!starter_ || key == *starter_ || unseen)) {
    decision.end_step = true;
    cut_pending_ = false;
  }
  Rival& rival = rivals_[key];
  // Until the clock has ticked, how many of the rival's signals one of its steps holds is unknown.
  std::uint32_t needed = std::max(kMinSignalsToTakeOver, 2 * rival.most_per_tick + 1);
  if (clock_ticks_ > 0 && rival.since_tick >= needed) {
    takeClock(key, event, decision);
    decision.ended_step_is_new_phase = true;
  }
  return decision;
}

std::optional<FrameworkStepClock::Key> FrameworkStepClock::phaseBroughtBack(const Key& key) const {
  auto companion = companion_of_.find(key);
  if (companion == companion_of_.end() || companion->second == *clock_) return std::nullopt;
  if (seen_under_several_.count(key) != 0) return std::nullopt;
  // A signal already seen under this clock is part of its phase, whatever it came with before.
  auto rival = rivals_.find(key);
  if (rival != rivals_.end() && rival->second.under_clock > 0) return std::nullopt;
  return companion->second;
}

bool FrameworkStepClock::noteSignal(const Key& key) {
  Rival& rival = rivals_[key];
  bool unseen = rival.under_clock == 0;
  if (rival.since_tick == 0) rival.position = signals_since_tick_;
  ++signals_since_tick_;
  ++rival.since_tick;
  ++rival.under_clock;
  auto seen = seen_under_.emplace(key, *clock_).first;
  if (seen->second != *clock_) seen_under_several_.insert(key);
  return unseen;
}

void FrameworkStepClock::tick() {
  std::optional<Key> starter;
  const Rival* best = nullptr;
  for (auto& [other, rival] : rivals_) {
    rival.most_per_tick = std::max(rival.most_per_tick, rival.since_tick);
    rival.regular_ticks = rival.since_tick == 1 ? rival.regular_ticks + 1 : 0;
    rival.since_tick = 0;
    // An optimizer's step ends an update (a GAN's generator's), it begins no iteration.
    if (other.first == StepSignal::kOptimizerStep || rival.regular_ticks < kTicksToStart) continue;
    bool better = best == nullptr || other.first > starter->first ||
                  (other.first == starter->first && rival.position < best->position);
    if (better) {
      starter = other;
      best = &rival;
    }
  }
  starter_ = starter;
  signals_since_tick_ = 0;
  ++clock_ticks_;
  ++uses_[current_use_].steps;
}

void FrameworkStepClock::takeClock(const Key& key, const StepEvent& event,
                                   ClockDecision& decision) {
  if (clock_) {
    // What came in most of the clock's steps may bring its phase back once it is left, unless it
    // also came more often than in any step while the new clock was taking over (the model's
    // calls by an evaluation pass's first batches): it goes with the new phase as well.
    for (const auto& [other, rival] : rivals_) {
      if (other != key && clock_ticks_ >= kMinSignalsToTakeOver &&
          2 * rival.under_clock >= clock_ticks_ && rival.since_tick <= rival.most_per_tick) {
        companion_of_[other] = *clock_;
      }
    }
  }
  clock_ = key;
  clock_ticks_ = 0;
  cut_pending_ = true;  // the clock's own signal, as a tick
  starter_.reset();
  signals_since_tick_ = 0;
  rivals_.erase(key);
  // What the others gave under the old clock says nothing of how they go with the new one.
  for (auto& [other, rival] : rivals_) rival = Rival{};
  auto named = phase_names_.find(key);
  std::string phase = named != phase_names_.end() ? named->second : phaseName(event);
  if (named == phase_names_.end()) {
    // Two objects of one name (two loaders over datasets of one type) are two phases.
    int same = 0;
    for (const auto& [other, name] : phase_names_) same += name.rfind(phase, 0) == 0 ? 1 : 0;
    if (same > 0) phase += " " + std::to_string(same + 1);
    phase_names_.emplace(key, phase);
  }
  auto use = std::find_if(uses_.begin(), uses_.end(),
                          [&](const ClockUse& existing) { return existing.phase == phase; });
  if (use == uses_.end()) {
    uses_.push_back(ClockUse{phase, event.signal, event.name, 0});
    use = uses_.end() - 1;
  }
  current_use_ = static_cast<std::size_t>(use - uses_.begin());
  decision.end_step = true;
  decision.new_phase = phase;
}

}  // namespace memseal::inject
