// The findings of memory that builds up, made while it is held: once when a build-up is first
// judged growing, again each time it doubles (so a long build-up is told as it was at its largest,
// at a cost of a few reports per build-up). Once a build-up is freed (a running total reset, a
// list cleared at an epoch's end), what it held is told from the finding made while it was held
// (heldCauses): by then its tensors and graphs are gone.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "detect/evidence.h"
#include "detect/findings.h"
#include "detect/held_causes.h"
#include "detect/retention_history.h"
#include "detect/step_phases.h"
#include "detect/step_records.h"

namespace memseal::detect {

class BuiltFindings {
 public:
  // Whether the boundary's `evidence` has a build-up with no finding yet, or one that doubled
  // since its last.
  bool needed(const LeakEvidence& evidence) const;
  // The findings made again, from evidence gathered for a report (graph roots kept).
  void refresh(const LeakEvidence& full);
  // The build-ups that collapsed, as causes held and freed: one per finding, whatever number of
  // its groups collapsed together, and none while a part of it still builds up (one build-up is not
  // two). `records` gives the resident growth of graphs that held no tensor storage.
  std::vector<HeldCause> heldCauses(const std::vector<Collapse>& collapses,
                                    const RetentionHistory& history, const StepPhases& phases,
                                    const StepRecords& records) const;
  void forgetGroupsNotBuildingUp(const RetentionHistory& history);

 private:
  // The newest finding that holds each group while it builds up, and the build-up's length
  // (judged steps) then.
  std::map<GroupId, std::shared_ptr<const BuiltFinding>> built_;
  std::map<GroupId, std::uint32_t> built_at_steps_;
};

}  // namespace memseal::detect
