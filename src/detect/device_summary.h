// The per-device summary of a leak report: what each CUDA device's caching allocator holds, the
// verdict on it (leak, caching, fragmentation or steady) and its memory step by step, for the
// check JSON and the HTML page. The findings and notes on the same ledger are device_findings.h's.
#pragma once

#include <cstdint>
#include <vector>

#include "detect/device_diagnosis.h"
#include "memseal/leak_detector.h"

namespace memseal::detect {

// One summary per device the process's ledger has seen, by ordinal; `warmup` as the detector's.
// Empty when no device event was seen.
std::vector<DeviceMemorySummary> summarizeDevices(std::uint32_t warmup);

// Bytes of the live blocks the CUDA caching allocator holds now, over every device; 0 where it
// reported no event.
std::int64_t deviceAllocatedBytes();

// The ledger's step samples as at most `limit` points (at least 1): each point stands for a
// stretch of consecutive samples, with its last step and its highest allocated and reserved, so
// that peaks survive thinning. Pure, for tests.
std::vector<DeviceStepPoint> thinDeviceSteps(const std::vector<track::DeviceStepSample>& samples,
                                             std::size_t limit);

}  // namespace memseal::detect
