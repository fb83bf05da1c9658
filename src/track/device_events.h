// Device (CUDA) memory as the caching allocator reports it: its trace hook (track/cuda/) hands
// every segment and block event here, in order, and one ledger per process keeps what is live per
// device, closes a sample at every step boundary, and writes the forensics file of an
// out-of-memory. Tests feed synthetic events, so all of this runs without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "analyze/device_memory.h"

namespace memseal::track {

// Thread-safe; called with the allocator's own lock held, so it takes no other lock than its own
// and never the GIL. Events are applied while a session is active (and ignored otherwise); `step`
// and `site` are filled in from the calling thread when left 0.
void recordDeviceEvent(analyze::DeviceMemoryEvent event);
// Closes the step in the ledger when device events were seen (setSessionStep calls it).
void endDeviceStep(std::uint32_t step);
// Runs `read` on the ledger under its lock. `read` must not record device events.
void readDeviceLedger(const std::function<void(const analyze::DeviceMemoryLedger&)>& read);
// A session starts: the ledger starts empty.
void resetDeviceLedger();
bool deviceEventsSeen();
// The file the last out-of-memory's forensics went to ("" when none was written). The folder is
// MEMSEAL_OOM_DIR, else the working directory; the name memseal-cuda-oom-PID-N.json.
std::string lastOomForensicsPath();
// Attaches the CUDA caching allocator's trace hook once CUDA is initialised in this process (a
// no-op before, after it is attached, and in builds without CUDA). Sessions call it when they start
// and at every step boundary; it never initialises CUDA itself.
void attachCudaAllocatorTrace();
bool cudaAllocatorTraceAttached();

// "aten::empty_strided (inside aten::linear) in scope a/b": how device reports name a site.
std::string deviceSiteLabel(std::uint32_t site);

}  // namespace memseal::track
