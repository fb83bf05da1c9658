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

std::string stepDescription(const StepEvent& event) {
  switch (event.signal) {
    case StepSignal::kOptimizerStep:
      return "one step per call of " + event.name + ".step() (the program's optimizer)";
    case StepSignal::kLoaderBatch:
      return "one step per call of next() on the batches of " + event.name;
    case StepSignal::kModuleCall:
      return "one step per call of " + event.name + " (the outermost module)";
  }
  return event.name;
}

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
      takeClock(event, decision);
      // What ran before is start-up, the first phase's first step: no step of its own.
      decision.end_step = false;
    }
    return decision;
  }
  if (key == *clock_) {
    for (auto& [other, rival] : rivals_) {
      rival.most_per_tick = std::max(rival.most_per_tick, rival.since_tick);
      rival.since_tick = 0;
    }
    decision.end_step = true;
    ++clock_ticks_;
    ++uses_[current_use_].steps;
    return decision;
  }
  if (event.signal > clock_->first) {
    takeClock(event, decision);
    return decision;
  }
  Rival& rival = rivals_[key];
  ++rival.since_tick;
  // Until the clock has ticked, how many of the rival's signals one of its steps holds is unknown.
  std::uint32_t needed = std::max(kMinSignalsToTakeOver, 2 * rival.most_per_tick + 1);
  if (clock_ticks_ > 0 && rival.since_tick >= needed) takeClock(event, decision);
  return decision;
}

void FrameworkStepClock::takeClock(const StepEvent& event, ClockDecision& decision) {
  Key key{event.signal, event.object};
  clock_ = key;
  clock_ticks_ = 0;
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
    uses_.push_back(ClockUse{phase, stepDescription(event), 0});
    use = uses_.end() - 1;
  }
  current_use_ = static_cast<std::size_t>(use - uses_.begin());
  decision.end_step = true;
  decision.new_phase = phase;
}

}  // namespace memseal::inject
