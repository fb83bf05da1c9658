#include "inject/framework_steps.h"

#include "inject/step_ledger.h"

namespace memseal::inject {

FrameworkSteps::FrameworkSteps(StepLedger& ledger, StepSource& guessed)
    : ledger_(ledger), guessed_(guessed) {}

void FrameworkSteps::onEvent(const StepEvent& event) {
  if (ledger_.stopped()) return;
  Clock::time_point now = Clock::now();
  bool taken = false;
  {
    std::lock_guard<std::mutex> lock(clock_mutex_);
    std::optional<std::size_t> before = clock_.currentUse();
    ClockDecision decision = clock_.onEvent(event);
    phase_steps_.resize(clock_.uses().size(), 0);
    if (!before && decision.new_phase.empty()) return;  // no clock yet
    if (!before) {
      // From the program's own first clock on, its op sequences no longer end steps; what ran
      // before is the first phase's first step.
      guessed_.handOver();
      std::lock_guard<std::mutex> steps(ledger_.mutex());
      ledger_.phaseLocked(decision.new_phase);
      return;
    }
    if (!decision.end_step) return;
    taken = stepLocked(decision, *before, now);
  }
  if (taken) ledger_.afterStep();
}

bool FrameworkSteps::stepLocked(const ClockDecision& decision, std::size_t ending_use,
                                Clock::time_point now) {
  std::lock_guard<std::mutex> lock(ledger_.mutex());
  // A change of phase is always a step: what ran before it is the old phase's.
  bool coalesce = decision.new_phase.empty() && steps_taken_ > 0;
  bool began_at_last_tick = last_tick_taken_;
  last_tick_taken_ = !coalesce || !ledger_.tooSoonLocked(now);
  if (!last_tick_taken_ || !ledger_.takeLocked(now, false)) return false;
  // The step ended now is the new phase's when it began where the clock last ended one and holds
  // only the new clock's first signals; after a coalesced end it holds the old phase's work too.
  bool back = decision.ended_step_is_new_phase && began_at_last_tick;
  ++steps_taken_;
  ++phase_steps_[back ? *clock_.currentUse() : ending_use];
  if (!decision.new_phase.empty()) ledger_.phaseLocked(decision.new_phase, back ? 1 : 0);
  return true;
}

namespace {

report::ProgramClockSteps::Signal reportedSignal(StepSignal signal) {
  switch (signal) {
    case StepSignal::kOptimizerStep:
      return report::ProgramClockSteps::Signal::kOptimizerStep;
    case StepSignal::kLoaderBatch:
      return report::ProgramClockSteps::Signal::kLoaderBatch;
    case StepSignal::kModuleCall:
      break;
  }
  return report::ProgramClockSteps::Signal::kModuleCall;
}

}  // namespace

std::vector<report::StepsTaken> FrameworkSteps::stepsTaken() {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  std::vector<report::StepsTaken> taken;
  const auto& uses = clock_.uses();
  for (std::size_t i = 0; i < uses.size(); ++i) {
    report::ProgramClockSteps clock;
    clock.signal = reportedSignal(uses[i].signal);
    clock.object = uses[i].object_name;
    if (uses.size() > 1) clock.phase = uses[i].phase;
    clock.steps = phase_steps_[i];
    taken.push_back(std::move(clock));
  }
  return taken;
}

std::vector<std::pair<std::string, double>> FrameworkSteps::iterationsPerStep() {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  std::vector<std::pair<std::string, double>> ratios;
  const auto& uses = clock_.uses();
  for (std::size_t i = 0; i < uses.size(); ++i) {
    // The clock's own signals (uses[i].steps), against the steps they ended.
    if (phase_steps_[i] == 0 || uses[i].steps <= phase_steps_[i]) continue;
    ratios.emplace_back(uses[i].phase,
                        static_cast<double>(uses[i].steps) / static_cast<double>(phase_steps_[i]));
  }
  return ratios;
}

}  // namespace memseal::inject
