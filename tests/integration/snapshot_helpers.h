// Helpers for tracker snapshots that several integration test files share (they are compiled
// together, so a helper of one file's own would clash with another's).
#pragma once

#include <string>

#include "memseal/tracker.h"

namespace memseal::test {

// The site whose outermost op is `outer_op`, or null. Takes the snapshot by reference: the returned
// pointer points into it.
inline const SiteSnapshot* findSite(const Snapshot& snapshot, const std::string& outer_op) {
  for (const SiteSnapshot& site : snapshot.sites) {
    if (site.site.outer_op == outer_op) return &site;
  }
  return nullptr;
}

}  // namespace memseal::test
