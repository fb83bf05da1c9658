// The detector's verdict on a child that `memseal run --follow-fork` saw forked but not exec'd
// (inject/fork_child_watch.h records its windows). Such a child starts as a copy of its parent, its
// tracker's tables included, and runs no census of its own: it is judged on two series, tracked
// tensor memory and private memory at the end of each time window, with the detector's own growth
// criterion, categories and fixes (diagnosis.h): tensors retained, or untracked growth where
// private memory grows while tensor memory does not (copy-on-write of pages shared with the
// parent). Pure: tested on its own.
#pragma once

#include <cstdint>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// `tensor_bytes` and `private_bytes`: samples at the end of each window; `parent`: the pid it was
// forked from (the report's origin).
LeakReport forkedChildReport(std::int64_t parent, const std::vector<std::int64_t>& tensor_bytes,
                             const std::vector<std::int64_t>& private_bytes);

}  // namespace memseal::detect
