// Leases are rare next to allocations (one per request), so each recorded lease takes one table
// insert and one remove; a lease taken while no session is active costs an atomic read.
#include "track/pool_leases.h"

#include <ATen/core/TensorBase.h>

#include "track/memory_counters.h"
#include "track/record_context.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/tensor_reference.h"
#include "track/thread_state.h"

namespace memseal::track {

LiveTable& poolLeases() {
  static auto* table = new LiveTable();  // never destroyed: leases may end during exit
  return *table;
}

void markPoolBuffer(const at::TensorBase& buffer) {
  if (!buffer.defined() || !buffer.unsafeGetTensorImpl()->has_storage()) return;
  void* data = buffer.storage().data_ptr().get();
  if (data == nullptr) return;
  TrackerWork work;
  liveAllocations().update(data, [](LiveRecord& record) { record.flags |= kPoolBuffer; });
}

std::uint32_t poolLeaseName(const char* label) {
  TrackerWork work;
  return siteTable().internString(label);
}

bool beginLease(const at::TensorBase& lease, std::uint32_t lease_name) {
  if (!sessionActive()) return false;
  void* data = lease.storage().data_ptr().get();
  if (data == nullptr) return false;
  ThreadState& state = threadState();
  TrackerWork work(state);
  LiveRecord record;
  record.data = data;
  record.bytes = lease.nbytes();
  record.thread_serial = state.allocation_serial;
  noteRecordContext(state, record);
  record.thread_slot = cpuCounters().threadSlot(state);
  record.site = siteTable().currentSiteNamed(state, lease_name);
  record.signature = signatureOf(lease);
  LiveRecord stale;
  poolLeases().remove(data, &stale);  // of an earlier session
  return poolLeases().insert(record);
}

void endLease(const void* buffer_data) {
  if (buffer_data == nullptr) return;
  LiveRecord record;
  TrackerWork work;
  poolLeases().remove(const_cast<void*>(buffer_data), &record);
}

}  // namespace memseal::track
