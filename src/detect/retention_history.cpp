#include "detect/retention_history.h"

#include <algorithm>

#include "detect/growth_criterion.h"

namespace memseal::detect {

namespace {

std::map<GroupId, const GroupAtBoundary*> byId(const std::vector<GroupAtBoundary>& groups) {
  std::map<GroupId, const GroupAtBoundary*> index;
  for (const GroupAtBoundary& group : groups) index[group.id] = &group;
  return index;
}

}  // namespace

double medianLength(const std::map<std::uint32_t, std::uint32_t>& counted_lengths) {
  std::uint64_t total = 0;
  for (const auto& entry : counted_lengths) total += entry.second;
  if (total == 0) return 0;
  // The lengths at positions (total - 1) / 2 and total / 2, counted from 0 in sorted order.
  std::uint64_t lower_rank = (total - 1) / 2;
  std::uint64_t upper_rank = total / 2;
  double lower = 0;
  double upper = 0;
  std::uint64_t seen = 0;
  for (const auto& [length, count] : counted_lengths) {
    if (lower_rank >= seen && lower_rank < seen + count) lower = length;
    if (upper_rank >= seen && upper_rank < seen + count) {
      upper = length;
      break;
    }
    seen += count;
  }
  return (lower + upper) / 2;
}

std::uint32_t RetentionHistory::segmentStart(const GroupId& id) const {
  auto found = segment_start_.find(id);
  return found == segment_start_.end() ? 0 : found->second;
}

bool RetentionHistory::anyFalling() const {
  return std::any_of(building_.begin(), building_.end(),
                     [](const auto& entry) { return entry.second.falling; });
}

std::uint32_t RetentionHistory::buildUpSteps(const GroupId& id) const {
  auto found = building_.find(id);
  return found == building_.end() ? 0 : found->second.judged_steps;
}

std::uint32_t RetentionHistory::stillHeld(const BuildUp& build, const GroupAtBoundary* group) {
  if (group == nullptr || group->steps == nullptr) return 0;
  auto begin = std::lower_bound(group->steps->begin(), group->steps->end(), build.oldest);
  auto end = std::upper_bound(begin, group->steps->end(), build.newest);
  return static_cast<std::uint32_t>(end - begin);
}

bool RetentionHistory::collapsed(const BuildUp& build, const GroupAtBoundary* group) {
  return stillHeld(build, group) * 4 <= build.alive_steps;
}

std::vector<Collapse> RetentionHistory::collapsedSince(const std::vector<GroupAtBoundary>& groups,
                                                       std::uint32_t current_step) const {
  std::vector<Collapse> collapses;
  std::map<GroupId, const GroupAtBoundary*> index = byId(groups);
  for (const auto& [id, build] : building_) {
    auto found = index.find(id);
    if (!collapsed(build, found == index.end() ? nullptr : found->second)) continue;
    if (build.judged_steps < kMinBuildUpSteps) continue;
    Collapse collapse;
    collapse.id = id;
    collapse.first_step = build.oldest;
    collapse.last_step = build.newest;
    collapse.freed_by = current_step;
    collapse.judged_steps = build.judged_steps;
    collapse.detected_at = build.detected_at;
    collapse.peak_bytes = build.peak_bytes;
    collapse.segment_start = segmentStart(id);
    collapses.push_back(collapse);
  }
  return collapses;
}

std::vector<Collapse> RetentionHistory::update(const std::vector<GroupAtBoundary>& groups,
                                               std::uint32_t current_step) {
  std::vector<Collapse> collapses = collapsedSince(groups, current_step);
  std::map<GroupId, const GroupAtBoundary*> index = byId(groups);
  for (auto it = building_.begin(); it != building_.end();) {
    auto found = index.find(it->first);
    const GroupAtBoundary* group = found == index.end() ? nullptr : found->second;
    if (collapsed(it->second, group)) {
      // Survivors from here on belong to the next build-up: it starts with the first step that
      // still has survivors after the one freed (the boundary that saw the collapse may come a
      // few steps after it), or after that build-up's last step.
      std::uint32_t next = it->second.newest + 1;
      if (group != nullptr && group->steps != nullptr) {
        auto after =
            std::upper_bound(group->steps->begin(), group->steps->end(), it->second.newest);
        if (after != group->steps->end()) next = *after;
      }
      segment_start_[it->first] = next;
      turnover_.erase(it->first);  // counted again from the new segment
      it = building_.erase(it);
    } else if (!it->second.falling && (group == nullptr || !group->grows) &&
               stillHeld(it->second, group) * 2 <= it->second.alive_steps) {
      it->second.falling = true;  // half of it freed at once: the next update tells the rest
      ++it;
    } else if (group == nullptr || !group->grows) {
      // Given back a little at a time, or no longer enough of the steps: not a build-up that ends
      // together.
      it = building_.erase(it);
    } else {
      ++it;
    }
  }
  for (const GroupAtBoundary& group : groups) {
    if (!group.grows || group.steps == nullptr || group.steps->empty()) continue;
    std::uint32_t start = segmentStart(group.id);
    auto first = std::lower_bound(group.steps->begin(), group.steps->end(), start);
    if (first == group.steps->end()) continue;
    auto [entry, fresh] = building_.try_emplace(group.id);
    BuildUp& build = entry->second;
    if (fresh) build.detected_at = current_step > 0 ? current_step - 1 : 0;
    build.falling = false;
    build.oldest = *first;
    build.newest = group.steps->back();
    build.alive_steps = static_cast<std::uint32_t>(group.steps->end() - first);
    build.judged_steps = group.judged_steps;
    build.peak_bytes = std::max(build.peak_bytes, group.bytes);
  }
  followTurnover(groups, current_step);
  return collapses;
}

void RetentionHistory::CountSeries::add(std::uint32_t step, std::int64_t count) {
  newest_step = step;
  newest_count = count;
  if (!steps.empty() && ++since_kept < stride) return;
  since_kept = 0;
  steps.push_back(step);
  counts.push_back(count);
  if (steps.size() <= kMaxTurnoverSamples) return;
  // Every other sample from the oldest: the kept ones are `stride` * 2 updates apart.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < steps.size(); i += 2) {
    steps[kept] = steps[i];
    counts[kept] = counts[i];
    ++kept;
  }
  steps.resize(kept);
  counts.resize(kept);
  stride *= 2;
}

void RetentionHistory::CountSeries::since(std::uint32_t first_step,
                                          std::vector<std::uint32_t>* steps_out,
                                          std::vector<std::int64_t>* counts_out) const {
  auto begin = std::lower_bound(steps.begin(), steps.end(), first_step);
  steps_out->assign(begin, steps.end());
  counts_out->assign(counts.begin() + (begin - steps.begin()), counts.end());
  if (newest_step >= first_step && (steps_out->empty() || steps_out->back() < newest_step)) {
    steps_out->push_back(newest_step);
    counts_out->push_back(newest_count);
  }
  // The later half (at least 8 samples): what the group does now, not what it did long ago (a
  // cache full for a long time that starts to grow, a cache that filled long after its first
  // eviction).
  std::size_t keep = std::max<std::size_t>(8, steps_out->size() / 2);
  if (steps_out->size() > keep) {
    auto drop = static_cast<std::ptrdiff_t>(steps_out->size() - keep);
    steps_out->erase(steps_out->begin(), steps_out->begin() + drop);
    counts_out->erase(counts_out->begin(), counts_out->begin() + drop);
  }
}

std::size_t RetentionHistory::CountSeries::countSince(std::uint32_t first_step) const {
  auto begin = std::lower_bound(steps.begin(), steps.end(), first_step);
  auto kept = static_cast<std::size_t>(steps.end() - begin);
  bool newest_apart = newest_step >= first_step && (kept == 0 || steps.back() < newest_step);
  return kept + (newest_apart ? 1 : 0);
}

bool RetentionHistory::CountSeries::grows(std::uint32_t first_step) const {
  std::vector<std::uint32_t> judged_steps;
  std::vector<std::int64_t> judged_counts;
  since(first_step, &judged_steps, &judged_counts);
  return steadyTensorGrowthPerStep(judged_steps, judged_counts) > 0;
}

bool RetentionHistory::CountSeries::flat(std::uint32_t first_step) const {
  std::vector<std::uint32_t> judged_steps;
  std::vector<std::int64_t> judged_counts;
  since(first_step, &judged_steps, &judged_counts);
  std::size_t n = judged_counts.size();
  if (n < 8) return false;
  auto quarter_end = judged_counts.begin() + static_cast<std::ptrdiff_t>(n / 4);
  auto last_begin = judged_counts.end() - static_cast<std::ptrdiff_t>(n / 4);
  return *std::max_element(last_begin, judged_counts.end()) <=
         *std::max_element(judged_counts.begin(), quarter_end);
}

void RetentionHistory::followTurnover(const std::vector<GroupAtBoundary>& groups,
                                      std::uint32_t current_step) {
  std::map<GroupId, Turnover> followed;
  std::int64_t evicting_held = 0;
  bool any_evicting = false;
  for (const GroupAtBoundary& group : groups) {
    if (group.id.graph || group.steps == nullptr || group.steps->empty()) continue;
    auto begin = std::lower_bound(group.steps->begin(), group.steps->end(), segmentStart(group.id));
    auto alive_now = static_cast<std::uint32_t>(group.steps->end() - begin);
    if (alive_now == 0) continue;
    Turnover turnover;
    auto known = turnover_.find(group.id);
    if (known != turnover_.end()) turnover = std::move(known->second);
    if (turnover.last_update > 0 && turnover.first_eviction == 0) {
      // The steps it held at the last update that it still holds: fewer means some were freed.
      auto held_before = std::lower_bound(begin, group.steps->end(), turnover.last_update);
      if (static_cast<std::uint32_t>(held_before - begin) < turnover.alive_then) {
        turnover.first_eviction = current_step;
      }
    }
    turnover.last_update = current_step;
    turnover.alive_then = alive_now;
    if (turnover.first_eviction != 0) {
      turnover.held.add(current_step, alive_now);
      turnover.peak_bytes = std::max(turnover.peak_bytes, group.bytes);
      evicting_held += alive_now;
      any_evicting = true;
    }
    followed.emplace(group.id, std::move(turnover));
  }
  // Groups without survivors are forgotten: the map stays as large as what is held now.
  turnover_ = std::move(followed);
  if (any_evicting) evicting_held_.add(current_step, evicting_held);
  // Judged here, once per update: nothing it depends on changes until the next one.
  turnover_peak_bytes_ = 0;
  for (auto& [id, turnover] : turnover_) {
    turnover.turns_over = judgeTurnover(turnover);
    if (turnover.turns_over) turnover_peak_bytes_ += turnover.peak_bytes;
  }
}

bool RetentionHistory::judgeTurnover(const Turnover& turnover) const {
  if (turnover.first_eviction == 0) return false;
  if (turnover.last_update - turnover.first_eviction < kMinTurnoverSteps) return false;
  // Too few updates since to see a trend (a verdict renewed rarely): not judged yet.
  if (turnover.held.countSince(turnover.first_eviction) < kMinTurnoverSamples) return false;
  return !turnover.held.grows(turnover.first_eviction) ||
         evicting_held_.flat(turnover.first_eviction);
}

bool RetentionHistory::turnsOver(const GroupId& id) const {
  auto found = turnover_.find(id);
  return found != turnover_.end() && found->second.turns_over;
}

}  // namespace memseal::detect
