// Records of CUDA blocks in the live table. The hook side (recordDeviceBlock, forgetDeviceBlock)
// runs with the CUDA allocator's lock held: it takes only a shard lock of the live table, captures
// no stack and never touches Python, and drops a weak tensor reference at most (which frees a
// TensorImpl's host memory, never device memory).
#include "track/device_tensors.h"

#include <ATen/core/TensorBase.h>

#include <atomic>

#include "track/live_table.h"
#include "track/memory_counters.h"
#include "track/op_sampling.h"
#include "track/record_context.h"
#include "track/site_table.h"
#include "track/tensor_reference.h"

namespace memseal::track {

namespace {

std::atomic<bool> g_device_blocks_recorded{false};

}  // namespace

std::uint32_t recordDeviceBlock(ThreadState& state, int device, std::uint64_t address,
                                std::uint64_t bytes) {
  if (address == 0) return 0;
  LiveRecord record;
  record.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
  record.bytes = static_cast<std::size_t>(bytes);
  record.thread_serial = ++state.device_block_serial;
  noteRecordContext(state, record);
  record.flags |= kDeviceBlock | kDeviceSitePending;
  record.cuda_device = static_cast<std::int8_t>(device);
  record.thread_slot = cpuCounters().threadSlot(state);
  if (g_session.steps_vary.load(std::memory_order_relaxed)) {
    attributeDeviceBlockBySequence(state, record);
  } else {
    record.site = siteTable().currentOpSite(state);
  }
  // A block freed while no hook saw it (tracing began after its free was missed) leaves a record
  // that the new one replaces; its weak reference goes, outside the shard's lock.
  LiveRecord stale;
  if (liveAllocations().insert(record, &stale)) {
    g_device_blocks_recorded.store(true, std::memory_order_release);
  }  // else no room to grow: this block goes untracked
  if (stale.data != nullptr && stale.tensor != nullptr) dropWeakTensorReference(stale.tensor);
  return record.site;
}

void forgetDeviceBlock(std::uint64_t address) {
  if (!g_device_blocks_recorded.load(std::memory_order_acquire)) return;
  void* data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
  // CUDA's unified addressing keeps device blocks apart from host memory, but a CPU record must
  // never be taken for one: only a device block's record goes.
  c10::TensorImpl* tensor = nullptr;
  bool removed = liveAllocations().removeIf(data, [&](const LiveRecord& record) {
    if ((record.flags & kDeviceBlock) == 0) return false;
    tensor = record.tensor;
    return true;
  });
  if (removed && tensor != nullptr) dropWeakTensorReference(tensor);
}

void onDeviceOpOutput(ThreadState& state, const at::TensorBase& tensor,
                      std::uint64_t device_start_serial,
                      std::uint32_t (*site_of_ending_op)(ThreadState& state)) {
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  void* data = impl->storage().data_ptr().get();
  if (data == nullptr) return;
  std::uint32_t slot = state.slot;
  bool made_here = false;
  bool site_pending = false;
  liveAllocations().update(data, [&](const LiveRecord& record) {
    made_here = (record.flags & kDeviceBlock) != 0 && record.thread_slot == slot &&
                record.thread_serial > device_start_serial;
    site_pending = made_here && (record.flags & kDeviceSitePending) != 0;
  });
  if (!made_here) return;
  // Outside the shard lock: capturing a stack may intern it, and Python frames take the GIL.
  std::uint32_t site = site_pending ? site_of_ending_op(state) : 0;
  TensorSignature signature = signatureOf(tensor);
  c10::TensorImpl* displaced = nullptr;
  liveAllocations().update(data, [&](LiveRecord& record) {
    if ((record.flags & kDeviceBlock) == 0 || record.thread_slot != slot ||
        record.thread_serial <= device_start_serial) {
      return;  // freed and made again by another thread meanwhile
    }
    record.signature = signature;
    if (site != 0 && (record.flags & kDeviceSitePending) != 0) {
      record.site = site;
      record.flags &= static_cast<std::uint8_t>(~kDeviceSitePending);
    }
    recordDeviceOutputInSequence(state, record, signature);
    if (record.tensor != impl) {
      displaced = record.tensor;
      takeWeakTensorReference(impl);
      record.tensor = impl;
    }
  });
  if (displaced != nullptr) dropWeakTensorReference(displaced);
}

}  // namespace memseal::track
