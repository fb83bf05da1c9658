// A consistent view of the live table for analysis: the records of one tracking session, with a
// strong reference on each tensor still alive so its metadata can be read after the table's locks
// are released. Shared by snapshots, the leak detector and lifetime scopes.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>

#include "memseal/tracker.h"
#include "track/live_record.h"

namespace memseal::analyze {

struct LiveItem {
  track::LiveRecord record;
  c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> tensor;  // undefined when gone
};

// Which records a view holds. Memory accounting (snapshots, explain) wants the CPU storage as it
// is; leak analysis (the detector's census, scopes) wants what holders keep: a tensor pool's leases
// instead of its buffers, which are the pool's by design and never blamed, and CUDA tensors'
// blocks (track/device_tensors.h) besides CPU storage.
enum class LiveSet {
  kStorage,
  kHeld,
};

// Records of the current session for which `keep` is true (all when empty). Holding the returned
// vector keeps those tensors alive: drop it before expecting frees.
std::vector<LiveItem> collectLive(
    const std::function<bool(const track::LiveRecord&)>& keep = nullptr,
    LiveSet set = LiveSet::kStorage);
// Visits the current session's records under the tables' locks, taking no tensor reference.
// `visit` must not free tensors or allocate tracked memory.
void forEachLiveRecord(const std::function<void(const track::LiveRecord&)>& visit,
                       LiveSet set = LiveSet::kStorage);

// Newest first: by time, then by the thread's own allocation order.
bool newerThan(const track::LiveRecord& a, const track::LiveRecord& b);

// Whether the tensor may be read now: alive, and made on this thread (libtorch tensors are not safe
// to read while their owner thread changes them).
bool readableHere(const LiveItem& item);
// The tensor as it is now if readable here, else as it was when the op that made it returned.
TensorInfo describeTensor(const LiveItem& item);
TensorInfo describeSignature(const track::TensorSignature& signature);
LiveAllocation describeAllocation(const LiveItem& item);
// The site's op, scope and symbolized stack (the site's own, or its sampled example).
AllocationSite describeSite(std::uint32_t site_id);
std::string dtypeName(std::int8_t scalar_type);

// The address of a tensor's storage (the tracker's key for it), or null for an undefined tensor
// or one without storage.
const void* storageOf(const at::Tensor& tensor);
// The same for CPU storage only: what the CPU tracker sees (a CUDA model's parameters are not
// CPU memory).
const void* cpuStorageOf(const at::Tensor& tensor);
// The interned string with this id ("" for 0), e.g. a grad_fn type name.
std::string internedString(std::uint32_t id);

}  // namespace memseal::analyze
