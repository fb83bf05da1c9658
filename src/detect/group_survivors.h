// Where the survivors of the groups that keep growing are, read from the live table for the
// findings: an example tensor per group, its storages, and the graphs of its newest survivors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "analyze/retained_graphs.h"
#include "analyze/survivors.h"
#include "detect/evidence.h"
#include "memseal/tracker.h"
#include "track/autograd_node.h"

namespace memseal::detect {

// Storages listed per group: enough for the holder search and to tell what the graphs saved.
constexpr std::size_t kStoragesPerGroup = 256;
// Newest survivors whose graphs are walked to tell whether they hold the nodes of kept graphs.
constexpr std::size_t kKeptGraphsWalked = 16;

struct GroupSurvivors {
  TensorInfo example;
  std::vector<const void*> storages;  // of up to kStoragesPerGroup survivors
  // The graphs of the newest survivors with history that this thread made (kKeptGraphsWalked at
  // most).
  std::vector<track::NodeRef> kept_graphs;
};

// One example survivor per group of `groups`: the newest whose tensor is still referenced (its
// metadata is read live: requires_grad set after the op, as modules do, shows), else the newest;
// and where the group's survivors are, among those made in steps [first, last].
std::map<analyze::SurvivorKey, GroupSurvivors> groupSurvivors(
    const std::vector<StorageEvidence>& groups, std::uint32_t first, std::uint32_t last);

// Most of the group's survivors are held by the retained graphs (saved for their backward).
bool heldByGraphs(const GroupSurvivors& group, const analyze::RetainedGraphs& graphs);

}  // namespace memseal::detect
