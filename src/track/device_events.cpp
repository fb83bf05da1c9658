// One mutex over the ledger: device events come with the allocator's per-device lock already held
// (so devices are serialised here, which their events' order needs anyway) and cost a map insert or
// erase each, and a block event a push into the ring an out-of-memory's replay reads; every block
// allocation and free of a tensor is one.
#include "track/device_events.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "track/device_event_ring.h"
#include "track/device_tensors.h"
#include "track/record_context.h"
#include "track/session.h"
#include "track/site_table.h"
#include "track/thread_state.h"

namespace memseal::track {

namespace {

struct DeviceLedgerState {
  std::mutex mutex;
  track::DeviceMemoryLedger ledger;
  std::atomic<bool> seen{false};
  std::string last_oom_path;
  std::unique_ptr<DeviceEventRing> trace;  // while a MemoryTrace runs
  // Always kept (its storage untouched until CUDA memory moves): an out-of-memory's replay.
  EventRing<BlockHistoryEvent> block_history{kOomHistoryEvents};
};

DeviceLedgerState& state() {
  static auto* ledger = new DeviceLedgerState();  // never destroyed: events may come during exit
  return *ledger;
}

// What writes the forensics of an out-of-memory (report/ installs it: see setOutOfMemoryWriter).
std::atomic<OutOfMemoryWriter> g_out_of_memory_writer{nullptr};

void keepBlockHistory(DeviceLedgerState& ledger_state, const DeviceMemoryEvent& event) {
  bool allocation = event.kind == DeviceEventKind::kBlockAlloc;
  if (!allocation && event.kind != DeviceEventKind::kBlockFreeCompleted) return;
  ledger_state.block_history.push(
      {event.address, allocation ? event.bytes : 0, event.stream, event.device, allocation});
}

// Under the ledger's lock: the device's last out-of-memory, handed to the writer with what led
// there.
void writeOomForensics(DeviceLedgerState& ledger_state, int device) {
  const std::optional<OomRecord>& record = ledger_state.ledger.lastOom(device);
  OutOfMemoryWriter writer = g_out_of_memory_writer.load(std::memory_order_acquire);
  if (!record || writer == nullptr) return;
  OomHistory history;
  for (const BlockHistoryEvent& event : ledger_state.block_history.events()) {
    if (event.device == device) history.events.push_back(event);
  }
  history.dropped = ledger_state.block_history.dropped();
  history.live_blocks = ledger_state.ledger.occupiedBlocks(device);
  std::string path = writer(*record, history);
  if (!path.empty()) ledger_state.last_oom_path = path;
}

}  // namespace

void setOutOfMemoryWriter(OutOfMemoryWriter writer) {
  g_out_of_memory_writer.store(writer, std::memory_order_release);
}

DeviceSiteName deviceSiteName(std::uint32_t site) {
  SiteTable& sites = siteTable();
  DeviceSiteName name;
  if (site == 0 || sites.isOverflowSite(site)) {
    name.op = "<no op>";
    return name;
  }
  const SiteEntry& entry = sites.site(site);
  name.op = entry.key.inner_op != 0 ? sites.string(entry.key.inner_op) : "<no op>";
  if (entry.key.outer_op != 0 && entry.key.outer_op != entry.key.inner_op) {
    name.op += std::string(" (inside ") + sites.string(entry.key.outer_op) + ")";
  }
  name.scope = sites.scopePathText(entry.key.scope_path);
  return name;
}

std::string deviceSiteLabel(std::uint32_t site) {
  DeviceSiteName name = deviceSiteName(site);
  return name.scope.empty() ? name.op : name.op + " in scope " + name.scope;
}

void recordDeviceEvent(track::DeviceMemoryEvent event) {
  if (event.kind == track::DeviceEventKind::kBlockFreeRequested) forgetDeviceBlock(event.address);
  if (!sessionActive()) return;
  ThreadState& thread = threadState();
  // A block memseal's own work allocates (a report's tensors) is not the program's.
  std::uint32_t block_site = 0;
  if (event.kind == track::DeviceEventKind::kBlockAlloc && !thread.in_tracker) {
    TrackerWork work(thread);
    block_site = recordDeviceBlock(thread, event.device, event.address, event.bytes);
  }
  TrackerWork work(thread);
  if (event.step == 0) event.step = currentStep();
  bool made_by_an_op = event.kind == track::DeviceEventKind::kBlockAlloc ||
                       event.kind == track::DeviceEventKind::kSegmentAlloc ||
                       event.kind == track::DeviceEventKind::kSegmentMap;
  // The block's own site names it on steps whose ops are not watched too (replayed).
  if (event.site == 0 && block_site != 0) event.site = block_site;
  if (event.site == 0 && made_by_an_op) {
    // Op and scope only: a stack (and Python frames, which need the GIL) must not be taken under
    // the allocator's lock.
    event.site = siteTable().currentOpSite(thread);
  }
  DeviceLedgerState& ledger_state = state();
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  ledger_state.ledger.apply(event);
  keepBlockHistory(ledger_state, event);
  ledger_state.seen.store(true, std::memory_order_release);
  if (ledger_state.trace) {
    // The allocator's trace hook gives no time; the coarse clock is the CPU trace's as well.
    if (event.time_ns == 0) event.time_ns = coarseNowNs();
    ledger_state.trace->push(event);
  }
  if (event.kind == track::DeviceEventKind::kOutOfMemory) {
    writeOomForensics(ledger_state, event.device);
  }
}

void endDeviceStep(std::uint32_t step) {
  DeviceLedgerState& ledger_state = state();
  if (!ledger_state.seen.load(std::memory_order_acquire)) return;
  TrackerWork work;
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  ledger_state.ledger.endStep(step);
}

void readDeviceLedger(const std::function<void(const track::DeviceMemoryLedger&)>& read) {
  DeviceLedgerState& ledger_state = state();
  TrackerWork work;
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  read(ledger_state.ledger);
}

void resetDeviceLedger() {
  DeviceLedgerState& ledger_state = state();
  TrackerWork work;
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  ledger_state.ledger = track::DeviceMemoryLedger();
  // Events kept so far refer to segments the new ledger does not have: the viewer could not step
  // back through them from its segments.
  if (ledger_state.trace) ledger_state.trace->clear();
  // The history begins with the session, as the ledger does (memory moved between sessions
  // unseen; what is live then comes as blocks from before the history).
  ledger_state.block_history.restart();
  ledger_state.seen.store(false, std::memory_order_release);
  ledger_state.last_oom_path.clear();
}

void seedDeviceLedger(const std::vector<track::DeviceSegmentSeed>& segments) {
  if (segments.empty() || !sessionActive()) return;
  DeviceLedgerState& ledger_state = state();
  TrackerWork work;
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  for (const track::DeviceSegmentSeed& segment : segments) ledger_state.ledger.seed(segment);
  ledger_state.seen.store(true, std::memory_order_release);
}

void startDeviceEventTrace(std::size_t capacity) {
  auto ring = std::make_unique<DeviceEventRing>(capacity);  // allocated outside the lock
  DeviceLedgerState& ledger_state = state();
  TrackerWork work;
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  ledger_state.trace = std::move(ring);
}

DeviceTraceContents stopDeviceEventTrace() {
  DeviceLedgerState& ledger_state = state();
  TrackerWork work;
  std::unique_ptr<DeviceEventRing> ring;
  DeviceTraceContents contents;
  {
    std::lock_guard<std::mutex> lock(ledger_state.mutex);
    ring = std::move(ledger_state.trace);
    if (!ring) return contents;
    for (int device : ledger_state.ledger.devices()) {
      contents.devices.push_back({device, ledger_state.ledger.liveSegments(device)});
    }
  }
  contents.events = ring->events();
  contents.dropped = ring->dropped();
  return contents;
}

#if !defined(MEMSEAL_WITH_CUDA)
bool attachCudaAllocatorTrace() { return false; }
bool cudaAllocatorTraceAttached() { return false; }
void seedDeviceLedgerFromAllocator() {}
void releaseCachedDeviceMemory() {}
std::uint64_t deviceMemoryForProcess(int) { return 0; }
#endif

bool deviceEventsSeen() { return state().seen.load(std::memory_order_acquire); }

std::string lastOomForensicsPath() {
  DeviceLedgerState& ledger_state = state();
  std::lock_guard<std::mutex> lock(ledger_state.mutex);
  return ledger_state.last_oom_path;
}

}  // namespace memseal::track
