#include "detect/step_phases.h"

#include <algorithm>

namespace memseal::detect {

StepPhases::StepPhases() {
  runs_.push_back(Run{0, 0});
  names_.emplace_back();
}

std::uint32_t StepPhases::begin(std::uint32_t step, const std::string& name) {
  auto known = std::find(names_.begin(), names_.end(), name);
  auto phase = static_cast<std::uint32_t>(known - names_.begin());
  if (known == names_.end()) names_.push_back(name);
  // Runs that begin after `step` are taken back (the steps are relabelled).
  while (runs_.size() > 1 && runs_.back().first_step > step) runs_.pop_back();
  if (runs_.back().phase == phase) return phase;
  if (runs_.back().first_step >= step) {
    // The last run has no step yet: it becomes this phase's, or goes.
    if (runs_.size() == 1) {
      runs_.back().phase = phase;
      return phase;
    }
    runs_.pop_back();
    if (runs_.back().phase == phase) return phase;
  }
  if (runs_.size() >= kMaxRuns) {
    runs_limited_ = true;
    return runs_.back().phase;
  }
  runs_.push_back(Run{step, phase});
  return phase;
}

std::size_t StepPhases::runIndexOf(std::uint32_t step) const {
  auto after = std::upper_bound(runs_.begin(), runs_.end(), step,
                                [](std::uint32_t s, const Run& run) { return s < run.first_step; });
  return after == runs_.begin() ? 0 : static_cast<std::size_t>(after - runs_.begin()) - 1;
}

bool StepPhases::inFirstRunOfItsPhase(std::uint32_t step) const {
  std::size_t index = runIndexOf(step);
  for (std::size_t i = 0; i < index; ++i) {
    if (runs_[i].phase == runs_[index].phase) return false;
  }
  return true;
}

std::uint32_t StepPhases::phaseOf(std::uint32_t step) const {
  return runs_[runIndexOf(step)].phase;
}

PhaseSet StepPhases::phasesOf(const std::vector<std::uint32_t>& steps) const {
  if (runs_.size() == 1) return phaseBit(runs_.front().phase);
  PhaseSet phases = 0;
  for (std::uint32_t step : steps) phases |= phaseBit(phaseOf(step));
  return phases;
}

std::uint32_t StepPhases::mainPhaseOf(const std::vector<std::uint32_t>& steps) const {
  if (runs_.size() == 1 || steps.empty()) return runs_.front().phase;
  std::vector<std::size_t> count(names_.size(), 0);
  for (std::uint32_t step : steps) ++count[phaseOf(step)];
  return static_cast<std::uint32_t>(std::max_element(count.begin(), count.end()) - count.begin());
}

std::uint32_t StepPhases::stepsIn(PhaseSet phases, std::uint32_t first, std::uint32_t last) const {
  if (last < first) return 0;
  std::uint32_t count = 0;
  for (std::size_t i = runIndexOf(first); i < runs_.size() && runs_[i].first_step <= last; ++i) {
    if ((phaseBit(runs_[i].phase) & phases) == 0) continue;
    std::uint32_t begin = std::max(first, runs_[i].first_step);
    std::uint32_t end = i + 1 < runs_.size() ? std::min(last, runs_[i + 1].first_step - 1) : last;
    if (end >= begin) count += end - begin + 1;
  }
  return count;
}

std::vector<std::uint32_t> StepPhases::positionsOf(const std::vector<std::uint32_t>& steps,
                                                   PhaseSet phases, std::uint32_t first,
                                                   std::uint32_t last) const {
  std::vector<std::uint32_t> positions;
  positions.reserve(steps.size());
  // Steps of `phases` before the current run, within [first, last].
  std::uint32_t before = 0;
  std::size_t run = runIndexOf(first);
  for (std::uint32_t step : steps) {
    if (step < first || step > last) continue;
    while (run + 1 < runs_.size() && runs_[run + 1].first_step <= step) {
      if ((phaseBit(runs_[run].phase) & phases) != 0) {
        std::uint32_t begin = std::max(first, runs_[run].first_step);
        std::uint32_t end = runs_[run + 1].first_step - 1;
        if (end >= begin) before += end - begin + 1;
      }
      ++run;
    }
    if ((phaseBit(runs_[run].phase) & phases) == 0) continue;
    positions.push_back(before + step - std::max(first, runs_[run].first_step));
  }
  return positions;
}

void StepPhases::markBackward(std::uint32_t step) {
  if (!backward_steps_.empty()) {
    auto& last = backward_steps_.back();
    // Steps whose ops were not watched between two that ran backward, in one run of a phase, ran
    // it too as far as anyone can tell (ops are watched one step in N).
    bool same_run = runIndexOf(last.second) == runIndexOf(step);
    if (last.first <= step &&
        (last.second + 1 >= step || (same_run && step - last.second <= kBackwardGapSteps))) {
      last.second = std::max(last.second, step);
      return;
    }
  }
  backward_steps_.emplace_back(step, step);
  if (backward_steps_.size() > kMaxBackwardStretches) {
    // Bounded memory: the older half goes (their groups are long judged).
    backward_steps_.erase(
        backward_steps_.begin(),
        backward_steps_.begin() + static_cast<std::ptrdiff_t>(kMaxBackwardStretches / 2));
  }
}

bool StepPhases::backwardRan(PhaseSet phases) const {
  // Runs and backward's stretches of steps are both in step order.
  std::size_t stretch = 0;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    if ((phaseBit(runs_[i].phase) & phases) == 0) continue;
    std::uint32_t first = runs_[i].first_step;
    std::uint32_t last = i + 1 < runs_.size() ? runs_[i + 1].first_step - 1 : UINT32_MAX;
    while (stretch < backward_steps_.size() && backward_steps_[stretch].second < first) ++stretch;
    if (stretch < backward_steps_.size() && backward_steps_[stretch].first <= last) return true;
  }
  return false;
}

bool StepPhases::backwardRanInMostOf(const std::vector<std::uint32_t>& steps) const {
  std::size_t with = 0;
  std::size_t stretch = 0;
  for (std::uint32_t step : steps) {
    while (stretch < backward_steps_.size() && backward_steps_[stretch].second < step) ++stretch;
    if (stretch < backward_steps_.size() && backward_steps_[stretch].first <= step) ++with;
  }
  return 2 * with > steps.size();
}

std::vector<StepPhases::Summary> StepPhases::summaries(std::uint32_t end) const {
  std::vector<Summary> result;
  std::vector<int> index(names_.size(), -1);
  for (std::size_t i = 0; i < runs_.size() && runs_[i].first_step < end; ++i) {
    std::uint32_t run_end = i + 1 < runs_.size() ? std::min(end, runs_[i + 1].first_step) : end;
    if (run_end <= runs_[i].first_step) continue;
    std::uint32_t phase = runs_[i].phase;
    if (index[phase] < 0) {
      index[phase] = static_cast<int>(result.size());
      Summary summary;
      summary.name = names_[phase];
      summary.first_step = runs_[i].first_step;
      summary.backward_ran = backwardRan(phaseBit(phase));
      result.push_back(summary);
    }
    Summary& summary = result[static_cast<std::size_t>(index[phase])];
    summary.steps += run_end - runs_[i].first_step;
    summary.runs += 1;
  }
  return result;
}

}  // namespace memseal::detect
