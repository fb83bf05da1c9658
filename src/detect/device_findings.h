// What the detector says about device (CUDA) memory: from the caching allocator's events, a leak
// of allocated memory is a finding; caching and fragmentation are verdicts of the device's summary
// that say why reserved memory is high and what helps, never leaks; an out-of-memory names its
// forensics file.
#pragma once

#include <cstdint>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// Adds findings for every device whose events were seen, says in report.devices
// (summarizeDevices's, made before) how each growing device's growth is shown, and names the
// out-of-memory file; `warmup` as the detector's.
void addDeviceFindings(std::uint32_t warmup, LeakReport& report);

}  // namespace memseal::detect
