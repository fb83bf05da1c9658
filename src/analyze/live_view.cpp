// Collects under the live table's shard locks, reads tensors after: reading a tensor may drop the
// last reference to it, and its free re-enters the table.
#include "analyze/live_view.h"

#include <ATen/core/TensorBase.h>
#include <c10/core/ScalarType.h>

#include "analyze/symbolize.h"
#include "track/thread_state.h"

namespace memseal::analyze {

std::vector<LiveItem> collectLive(const std::function<bool(const track::LiveRecord&)>& keep) {
  track::Engine& engine = track::Engine::instance();
  std::uint32_t session = engine.session();
  std::vector<LiveItem> items;
  track::ThreadState& state = track::threadState();
  bool was_in_tracker = state.in_tracker;
  state.in_tracker = true;  // the vector's own growth is not a tensor, but keep the guard honest
  engine.live().forEach([&](const track::LiveRecord& record) {
    if (record.session != session) return;
    if (keep && !keep(record)) return;
    LiveItem item;
    item.record = record;
    if (record.tensor != nullptr) item.tensor = track::lockWeakTensorReference(record.tensor);
    items.push_back(std::move(item));
  });
  state.in_tracker = was_in_tracker;
  return items;
}

std::string dtypeName(std::int8_t scalar_type) {
  if (scalar_type < 0) return "";
  return c10::toString(static_cast<c10::ScalarType>(scalar_type));
}

TensorInfo describeTensor(const LiveItem& item) {
  TensorInfo info;
  track::Engine& engine = track::Engine::instance();
  track::TensorSignature signature = item.record.signature;
  // A tensor is read live only on the thread that made it: libtorch tensors are not safe to read
  // while their owner thread changes them (make_variable, requires_grad_), and that thread may be
  // running now. Other threads see the signature the owner recorded when the op returned.
  bool own_thread = item.record.thread_slot == track::threadState().slot;
  if (item.tensor.defined() && own_thread) {
    at::TensorBase tensor(item.tensor);
    try {
      signature = engine.signatureOf(tensor);
    } catch (...) {
      // Keep the signature from when the op returned.
    }
  }
  if (signature.dims < 0) return info;
  info.known = true;
  for (int i = 0; i < signature.dims && i < track::kMaxCachedDims; ++i) {
    info.shape.push_back(signature.sizes[i]);
  }
  info.dtype = dtypeName(signature.scalar_type);
  info.requires_grad = signature.requires_grad;
  info.is_leaf = signature.is_leaf;
  info.grad_fn = engine.string(signature.grad_fn_name);
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
  track::Engine& engine = track::Engine::instance();
  AllocationSite site;
  site.id = site_id;
  const track::SiteEntry& entry = engine.site(site_id);
  if (entry.key.inner_op == UINT32_MAX) {
    site.op = "<other sites: the site table is full>";
    return site;
  }
  site.op = entry.key.inner_op != 0 ? engine.string(entry.key.inner_op) : "<no op>";
  site.outer_op = engine.string(entry.key.outer_op);
  site.scope = engine.scopePathText(entry.key.scope_path);
  std::uint32_t stack_id =
      entry.key.stack != 0 ? entry.key.stack : entry.example_stack.load(std::memory_order_acquire);
  if (const track::StackEntry* stack = engine.stack(stack_id)) {
    site.frames = symbolizeStack(stack->frames, stack->depth);
  }
  return site;
}

}  // namespace memseal::analyze
