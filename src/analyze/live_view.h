// A consistent view of the live table for analysis: the records of one tracking session, with a
// strong reference on each tensor still alive so its metadata can be read after the table's locks
// are released. Shared by Tracker::snapshot, the leak detector and lifetime scopes.
#pragma once

#include <functional>
#include <vector>

#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>

#include "memseal/tracker.h"
#include "track/engine.h"

namespace memseal::analyze {

struct LiveItem {
  track::LiveRecord record;
  c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> tensor;  // undefined when gone
};

// Records of the current session for which `keep` is true (all when empty). Holding the returned
// vector keeps those tensors alive: drop it before expecting frees.
std::vector<LiveItem> collectLive(
    const std::function<bool(const track::LiveRecord&)>& keep = nullptr);

// The tensor as it is now if alive and made on this thread, else as it was when the op that made
// it returned.
TensorInfo describeTensor(const LiveItem& item);
LiveAllocation describeAllocation(const LiveItem& item);
// The site's op, scope and symbolized stack (the site's own, or its sampled example).
AllocationSite describeSite(std::uint32_t site_id);
std::string dtypeName(std::int8_t scalar_type);

}  // namespace memseal::analyze
