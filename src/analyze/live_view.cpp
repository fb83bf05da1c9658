// Collects under the live table's shard locks, reads tensors after: reading a tensor may drop the
// last reference to it, and its free re-enters the table.
#include "analyze/live_view.h"

#include <ATen/core/TensorBase.h>
#include <c10/core/ScalarType.h>

#include "analyze/symbolize.h"
#include "track/live_table.h"
#include "track/pool_leases.h"
#include "track/python_frames.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/tensor_reference.h"
#include "track/thread_state.h"

namespace memseal::analyze {

namespace {

// Visits the session's records of `set` under the tables' locks.
template <typename Visit>
void visitSession(LiveSet set, Visit&& visit) {
  std::uint32_t session = track::sessionId();
  track::liveAllocations().forEach([&](const track::LiveRecord& record) {
    if (record.session != session) return;
    if (set == LiveSet::kHeld && (record.flags & track::kPoolBuffer) != 0) return;
    if (set == LiveSet::kStorage && (record.flags & track::kDeviceBlock) != 0) return;
    visit(record);
  });
  if (set != LiveSet::kHeld) return;
  track::poolLeases().forEach([&](const track::LiveRecord& record) {
    if (record.session == session) visit(record);
  });
}

}  // namespace

std::vector<LiveItem> collectLive(const std::function<bool(const track::LiveRecord&)>& keep,
                                  LiveSet set) {
  std::vector<LiveItem> items;
  track::TrackerWork work;  // the vector's own growth is not a tensor, but keep the guard honest
  visitSession(set, [&](const track::LiveRecord& record) {
    if (keep && !keep(record)) return;
    LiveItem item;
    item.record = record;
    if (record.tensor != nullptr) item.tensor = track::lockWeakTensorReference(record.tensor);
    items.push_back(std::move(item));
  });
  return items;
}

void forEachLiveRecord(const std::function<void(const track::LiveRecord&)>& visit, LiveSet set) {
  track::TrackerWork work;
  visitSession(set, visit);
}

bool newerThan(const track::LiveRecord& a, const track::LiveRecord& b) {
  if (a.time_ns != b.time_ns) return a.time_ns > b.time_ns;
  return a.thread_serial > b.thread_serial;
}

std::string dtypeName(std::int8_t scalar_type) {
  if (scalar_type < 0) return "";
  return c10::toString(static_cast<c10::ScalarType>(scalar_type));
}

std::string internedString(std::uint32_t id) { return track::siteTable().string(id); }

bool readableHere(const LiveItem& item) {
  return item.tensor.defined() && item.record.thread_slot == track::threadState().slot;
}

TensorInfo describeSignature(const track::TensorSignature& signature) {
  TensorInfo info;
  if (signature.dims < 0) return info;
  info.known = true;
  for (int i = 0; i < signature.dims && i < track::kMaxCachedDims; ++i) {
    info.shape.push_back(signature.sizes[i]);
  }
  info.dtype = dtypeName(signature.scalar_type);
  info.requires_grad = signature.requires_grad;
  info.is_leaf = signature.is_leaf;
  info.grad_fn = track::siteTable().string(signature.grad_fn_name);
  return info;
}

TensorInfo describeTensor(const LiveItem& item) {
  track::TensorSignature signature = item.record.signature;
  // Other threads see the signature the owner recorded when the op returned.
  if (readableHere(item)) {
    at::TensorBase tensor(item.tensor);
    try {
      signature = track::signatureOf(tensor);
    } catch (...) {
      // Keep the signature from when the op returned.
    }
  }
  TensorInfo info = describeSignature(signature);
  if (item.record.cuda_device >= 0) info.device = "cuda:" + std::to_string(item.record.cuda_device);
  return info;
}

LiveAllocation describeAllocation(const LiveItem& item) {
  LiveAllocation allocation;
  allocation.bytes = item.record.bytes;
  allocation.step = item.record.step;
  allocation.grad_mode = (item.record.flags & track::kGradMode) != 0;
  allocation.inference_mode = (item.record.flags & track::kInferenceMode) != 0;
  allocation.time_ns = item.record.time_ns;
  allocation.tensor = describeTensor(item);
  return allocation;
}

AllocationSite describeSite(std::uint32_t site_id) {
  track::SiteTable& sites = track::siteTable();
  AllocationSite site;
  site.id = site_id;
  if (sites.isOverflowSite(site_id)) {
    site.op = "<other sites: the site table is full>";
    return site;
  }
  const track::SiteEntry& entry = sites.site(site_id);
  site.op = entry.key.inner_op != 0 ? sites.string(entry.key.inner_op) : "<no op>";
  site.outer_op = sites.string(entry.key.outer_op);
  site.scope = sites.scopePathText(entry.key.scope_path);
  std::uint32_t stack_id =
      entry.key.stack != 0 ? entry.key.stack : entry.example_stack.load(std::memory_order_acquire);
  if (const track::StackEntry* stack = sites.stack(stack_id)) {
    site.frames = symbolizeStack(stack->frames, stack->depth);
    // Native frames first (innermost), then the Python code that called into them.
    track::appendPythonFrames(stack->python_stack, site.frames);
  }
  return site;
}

const void* storageOf(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return nullptr;
  return tensor.storage().data_ptr().get();
}

const void* cpuStorageOf(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_cpu() ? storageOf(tensor) : nullptr;
}

}  // namespace memseal::analyze
