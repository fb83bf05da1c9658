// Device (CUDA) memory as the caching allocator reports it: its trace hook (track/cuda/) hands
// every segment and block event here, in order, and one ledger per process keeps what is live per
// device, closes a sample at every step boundary, and writes the forensics file of an
// out-of-memory. Tests feed synthetic events, so all of this runs without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "track/device_ledger.h"

namespace memseal::track {

// Thread-safe; called with the allocator's own lock held, so it takes no other lock than its own
// and never the GIL. Events are applied while a session is active (and ignored otherwise); `step`
// and `site` are filled in from the calling thread when left 0.
void recordDeviceEvent(track::DeviceMemoryEvent event);
// Closes the step in the ledger when device events were seen (setSessionStep calls it).
void endDeviceStep(std::uint32_t step);
// Runs `read` on the ledger under its lock. `read` must not record device events.
void readDeviceLedger(const std::function<void(const track::DeviceMemoryLedger&)>& read);
// A session starts: the ledger starts empty.
void resetDeviceLedger();
bool deviceEventsSeen();
// The file the last out-of-memory's forensics went to ("" when none was written). The folder is
// MEMSEAL_OOM_DIR, else the working directory; the name memseal-cuda-oom-PID-N.json.
std::string lastOomForensicsPath();

// Writes the forensics of an out-of-memory (called under the ledger's lock, with the state just
// before the failed request and the block events that led there); returns where they went, empty
// when nowhere. Installed from above (report/cuda_oom.h's installOutOfMemoryWriter), so that the
// hot path names no report format; without one, an out-of-memory is only counted.
using OutOfMemoryWriter = std::string (*)(const OomRecord& record, const OomHistory& history);
void setOutOfMemoryWriter(OutOfMemoryWriter writer);
// Attaches the CUDA caching allocator's trace hook once CUDA is initialised in this process (a
// no-op before, after it is attached, and in builds without CUDA). Sessions call it when they start
// and at every step boundary; it never initialises CUDA itself.
// True when this call attached it.
bool attachCudaAllocatorTrace();
bool cudaAllocatorTraceAttached();
// Once the hook is attached: the caching allocator gives its cached free segments back to the
// driver (torch.cuda.empty_cache()), so that what a step reserves next is its own. A no-op before,
// and in builds without CUDA.
void releaseCachedDeviceMemory();
// What this process could hold on `device`: the driver's free memory plus what the allocator has
// reserved (torch.cuda.mem_get_info()[0] + memory_reserved()). 0 where unknown (no CUDA, or the
// hook not attached).
std::uint64_t deviceMemoryForProcess(int device);
// Once the hook is attached: the segments and blocks the allocator holds now go into the ledger
// (DeviceMemoryLedger::seed), so memory made before the session, or before CUDA's initialisation
// was noticed, is known. Sessions call it when they start and when the hook gets attached.
void seedDeviceLedgerFromAllocator();
// The ledger's side of it: under its lock, while a session is active.
void seedDeviceLedger(const std::vector<track::DeviceSegmentSeed>& segments);

// What a device event trace (below) holds when it stops: the newest events, oldest first, and the
// ledger's segments at that moment, taken under one lock so that the events end where the segments
// are (the memory viewer steps back from those segments through the events).
struct DeviceTraceContents {
  std::vector<track::DeviceMemoryEvent> events;
  std::uint64_t dropped = 0;  // older events the ring could not keep
  struct Device {
    int device = 0;
    std::vector<track::LiveSegment> segments;
  };
  std::vector<Device> devices;  // every device the ledger has seen, ascending
};

// While a trace runs (a MemoryTrace), recordDeviceEvent also keeps each applied event in a ring of
// the newest `capacity` (storage reserved here, not in the hook). One trace at a time: starting
// again replaces the running one.
void startDeviceEventTrace(std::size_t capacity);
// Stops the trace and returns what it kept (empty when none ran).
DeviceTraceContents stopDeviceEventTrace();

// A device site's op ("aten::empty_strided (inside aten::linear)", "<no op>") and MEMSEAL_REGION
// path ("" outside scopes), read from the site table alone: no stack is symbolized.
struct DeviceSiteName {
  std::string op;
  std::string scope;
};
DeviceSiteName deviceSiteName(std::uint32_t site);
// "aten::empty_strided (inside aten::linear) in scope a/b": how device reports name a site.
std::string deviceSiteLabel(std::uint32_t site);

}  // namespace memseal::track
