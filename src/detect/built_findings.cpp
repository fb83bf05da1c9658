#include "detect/built_findings.h"

#include <algorithm>
#include <utility>

#include "track/collected_frees.h"

namespace memseal::detect {

bool BuiltFindings::needed(const LeakEvidence& evidence) const {
  for (const GroupAtBoundary& group : evidence.groups) {
    if (!group.grows) continue;
    auto at = built_at_steps_.find(group.id);
    if (at == built_at_steps_.end() || group.judged_steps >= 2 * at->second) return true;
  }
  return false;
}

void BuiltFindings::refresh(const LeakEvidence& full) {
  std::map<GroupId, std::uint32_t> judged;
  for (const GroupAtBoundary& group : full.groups) judged[group.id] = group.judged_steps;
  for (BuiltFinding& finding : buildFindingsWithGroups(full)) {
    auto shared = std::make_shared<const BuiltFinding>(std::move(finding));
    for (const GroupId& id : shared->groups) {
      built_[id] = shared;
      built_at_steps_[id] = judged[id];
    }
  }
}

std::vector<HeldCause> BuiltFindings::heldCauses(const std::vector<Collapse>& collapses,
                                                 const RetentionHistory& history,
                                                 const StepPhases& phases,
                                                 const StepRecords& records) const {
  std::map<const BuiltFinding*, std::vector<const Collapse*>> by_finding;
  for (const Collapse& collapse : collapses) {
    auto found = built_.find(collapse.id);
    if (found != built_.end()) by_finding[found->second.get()].push_back(&collapse);
  }
  std::vector<HeldCause> causes;
  for (const auto& [built_finding, parts] : by_finding) {
    // Freed only when all it holds was: a part still building up is told with the rest when it
    // goes.
    bool still_held = std::any_of(
        built_finding->groups.begin(), built_finding->groups.end(), [&](const GroupId& id) {
          return history.buildingUp(id) &&
                 std::none_of(parts.begin(), parts.end(),
                              [&](const Collapse* part) { return part->id == id; });
        });
    if (still_held) continue;
    HeldCause cause;
    cause.finding = built_finding->finding;
    HeldUntilFreed freed;
    freed.first_step = parts.front()->first_step;
    cause.detected_at = parts.front()->detected_at;
    for (const Collapse* part : parts) {
      freed.first_step = std::min(freed.first_step, part->first_step);
      freed.last_step = std::max(freed.last_step, part->last_step);
      freed.freed_at_step = std::max(freed.freed_at_step, part->freed_by - 1);
      freed.peak_bytes += part->peak_bytes;
      cause.detected_at = std::min(cause.detected_at, part->detected_at);
    }
    if (freed.peak_bytes == 0) {
      freed.peak_bytes = records.residentGrowth(freed.first_step, freed.last_step);
    }
    freed.found_after_steps =
        cause.detected_at >= freed.first_step ? cause.detected_at - freed.first_step + 1 : 0;
    freed.times = 1;
    freed.steps_per_time = freed.last_step - freed.first_step + 1;
    freed.phase = phases.name(phases.phaseOf(freed.last_step));
    cause.build_up_lengths[freed.last_step - freed.first_step + 1] = 1;
    cause.finding.freed = freed;
    // Its memory is gone: where it was says nothing about what holds memory now.
    for (LeakPart& part : cause.finding.parts) part.storage_addresses.clear();
    cause.key = causeKey(cause.finding);
    cause.by_collector = std::all_of(parts.begin(), parts.end(), [](const Collapse* part) {
      return freedByCollector(*part, track::collectedFrees(collectorQuery(*part)));
    });
    for (const Collapse* part : parts) {
      // As the collapse was found: update() has begun the next segment since, where it was seen
      // at a boundary.
      cause.freed_before = cause.freed_before || part->segment_start > 0;
    }
    causes.push_back(std::move(cause));
  }
  return causes;
}

void BuiltFindings::forgetGroupsNotBuildingUp(const RetentionHistory& history) {
  for (auto it = built_.begin(); it != built_.end();) {
    if (history.buildingUp(it->first)) {
      ++it;
      continue;
    }
    built_at_steps_.erase(it->first);
    it = built_.erase(it);
  }
}

}  // namespace memseal::detect
