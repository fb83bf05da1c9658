// What the detector says about device (CUDA) memory: from the caching allocator's events, a leak
// of allocated memory is a finding; caching and fragmentation are notes that say why reserved
// memory is high and what helps, never leak verdicts; an out-of-memory names its forensics file.
#pragma once

#include <cstdint>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// Adds findings and notes for every device whose events were seen; `warmup` as the detector's.
void addDeviceFindings(std::uint32_t warmup, LeakReport& report);

}  // namespace memseal::detect
