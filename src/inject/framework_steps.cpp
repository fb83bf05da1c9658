#include "inject/framework_steps.h"

#include <algorithm>

#include "inject/step_boundary.h"
#include "inject/step_boundary_tuning.h"
#include "inject/time_scale.h"

namespace memseal::inject {

FrameworkSteps::FrameworkSteps(StepBoundary& boundary, LeakDetector& detector,
                               std::function<void()> after_step)
    : boundary_(boundary), detector_(detector), after_step_(std::move(after_step)) {}

void FrameworkSteps::onEvent(const StepEvent& event) {
  Clock::time_point now = Clock::now();
  bool taken = false;
  if (stopped_.load()) return;
  {
    std::lock_guard<std::mutex> lock(clock_mutex_);
    ClockDecision decision = clock_.onEvent(event);
    if (!started_) {
      started_ = true;
      // From the program's own first signal on, its op sequences no longer end steps.
      boundary_.handOver();
    }
    ticks_.resize(clock_.uses().size(), 0);
    phase_steps_.resize(clock_.uses().size(), 0);
    if (!decision.new_phase.empty()) phase_ = decision.new_phase;
    if (!decision.end_step) {
      if (!decision.new_phase.empty()) {
        std::lock_guard<std::mutex> steps(boundary_.stepMutex());
        detector_.phase(decision.new_phase);
      }
      return;
    }
    for (std::size_t i = 0; i < clock_.uses().size(); ++i) {
      if (clock_.uses()[i].phase == phase_) ++ticks_[i];
    }
    taken = stepLocked(decision, now);
  }
  if (taken && after_step_) after_step_();
}

bool FrameworkSteps::stepLocked(const ClockDecision& decision, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(boundary_.stepMutex());
  bool coalesce = decision.new_phase.empty() && steps_taken_ > 0;
  if (coalesce && now - last_step_ < min_step_gap_) return false;
  last_step_ = now;
  ++steps_taken_;
  // The step that ends now is the old phase's; the next one is the new phase's.
  detector_.step();
  if (!decision.new_phase.empty()) detector_.phase(decision.new_phase);
  for (std::size_t i = 0; i < clock_.uses().size(); ++i) {
    if (clock_.uses()[i].phase == phase_) ++phase_steps_[i];
  }
  // As StepBoundary does: signals closer together than a multiple of what a step costs are one
  // step, so that a loop of short iterations spends little of its time in the detector.
  Clock::duration cost = Clock::now() - now;
  step_cost_ = step_cost_ == Clock::duration::zero() ? cost : (4 * step_cost_ + cost) / 5;
  min_step_gap_ =
      std::clamp<Clock::duration>(kStepCostMultiple * step_cost_, scaledByTimeScale(kMinStepGap),
                                  scaledByTimeScale(kMaxStepGap));
  return true;
}

void FrameworkSteps::stopSteps() { stopped_.store(true); }

std::uint64_t FrameworkSteps::stepsTaken() {
  std::lock_guard<std::mutex> lock(boundary_.stepMutex());
  return steps_taken_;
}

bool FrameworkSteps::started() {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  return started_;
}

bool FrameworkSteps::wantsModuleCalls() {
  // Always: an evaluation pass that calls the model directly, with no loader, after training is a
  // phase of its own only when its calls are seen.
  return true;
}

std::vector<std::string> FrameworkSteps::description() {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  if (!started_) return {};
  std::vector<std::string> lines;
  const auto& uses = clock_.uses();
  for (std::size_t i = 0; i < uses.size(); ++i) {
    std::uint64_t steps = i < phase_steps_.size() ? phase_steps_[i] : 0;
    std::string line = "memseal run: " + uses[i].step_is + ", seen through PyTorch's hooks";
    if (uses.size() > 1) line += "; phase \"" + uses[i].phase + "\"";
    lines.push_back(line + " (" + std::to_string(steps) + " steps)");
  }
  return lines;
}

std::vector<std::pair<std::string, double>> FrameworkSteps::iterationsPerStep() {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  std::lock_guard<std::mutex> steps(boundary_.stepMutex());
  std::vector<std::pair<std::string, double>> ratios;
  const auto& uses = clock_.uses();
  for (std::size_t i = 0; i < uses.size() && i < ticks_.size(); ++i) {
    if (phase_steps_[i] == 0 || ticks_[i] <= phase_steps_[i]) continue;
    ratios.emplace_back(uses[i].phase,
                        static_cast<double>(ticks_[i]) / static_cast<double>(phase_steps_[i]));
  }
  return ratios;
}

}  // namespace memseal::inject
