// Tracker options as the Python package passes them: (name, value) pairs in the one grammar
// ({"stacks": "sample:8"}), checked by TrackerOptions::set, which names the option and what it
// accepts.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "memseal/tracker.h"

namespace memseal::python {

inline TrackerOptions trackerOptions(
    const std::vector<std::pair<std::string, std::string>>& options) {
  TrackerOptions tracker;
  for (const auto& [name, value] : options) tracker.set(name, value);
  return tracker;
}

}  // namespace memseal::python
