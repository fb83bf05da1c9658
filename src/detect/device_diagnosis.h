// What a CUDA device's step samples say: a leak, caching, fragmentation or steady; and why an
// out-of-memory happened. Beside the CPU findings; the samples come from track's ledger.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "track/device_ledger.h"

namespace memseal::detect {

using track::DeviceStepSample;
using track::OomRecord;

enum class DeviceVerdict {
  kSteady,         // allocated level, the cache no bigger than the step needs
  kLeak,           // allocated memory grows step after step without levelling off
  kCaching,        // reserved above what the steps use, allocated not growing: not a leak
  kFragmentation,  // reserved far above allocated, the free space split inside used segments
};

// "steady", "leak", "caching", "fragmentation"
const char* deviceVerdictName(DeviceVerdict verdict);

struct DeviceMemoryDiagnosis {
  DeviceVerdict verdict = DeviceVerdict::kSteady;
  std::uint32_t first_step = 0;  // the observed (post-warm-up) samples
  std::uint32_t last_step = 0;
  std::size_t observed_samples = 0;
  double allocated_slope_per_step = 0;  // least squares over the observed samples
  double leak_bytes_per_step = 0;       // growth that does not level off (0 when it does)
  double reserved_slope_per_step = 0;
  // The last sample's numbers.
  std::uint64_t allocated = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t reserved_minus_allocated = 0;
  std::uint64_t reserved_above_peak = 0;  // reserved - peak_allocated: held beyond the step's need
  std::uint64_t reserved_growth = 0;      // reserved's rise over the observed samples
  std::uint64_t inactive_split_blocks = 0;
  std::uint64_t inactive_split_bytes = 0;
  std::uint64_t free_segment_bytes = 0;
  std::uint64_t largest_free_extent = 0;
  double reserved_to_allocated = 0;  // reserved / allocated (allocated 0 counts as 1 byte)
  bool oom_from_fragmentation = false;
  std::string hint;  // what it means and what to do, for a newcomer
};

// `samples` of one device in step order (DeviceMemoryLedger::stepSamples); those before step
// `warmup` are ignored. `last_oom`, when given, must be of the same device.
DeviceMemoryDiagnosis diagnoseDevice(const std::vector<DeviceStepSample>& samples,
                                     std::uint32_t warmup,
                                     const std::optional<OomRecord>& last_oom);

enum class OomCause {
  // request > largest free extent on its stream while reserved - allocated >= request: there
  // was room in the cache, but not in one piece.
  kFragmentation,
  // The device reports at least the request free: a limit of this process was hit
  // (torch.cuda.set_per_process_memory_fraction, a MIG slice or container limit).
  kProcessLimit,
  // Neither: live tensors fill what the device has (a leak, or a workload too large).
  kDeviceFull,
};

const char* oomCauseName(OomCause cause);  // "fragmentation", "process-limit", "device-full"
OomCause oomCause(const OomRecord& record);
// One or two sentences: why the request failed and what to do.
std::string oomExplanation(const OomRecord& record);

}  // namespace memseal::detect
