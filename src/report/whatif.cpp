// memseal::whatIfSnapshot (memseal/whatif.h): a snapshot's trace read (pickle_reader.h,
// cuda_snapshot_trace.h) and replayed by the model of the caching allocator
// (explain/cuda_allocator_model.h) under each setting.
#include <stdexcept>

#include "explain/cuda_allocator_model.h"
#include "memseal/whatif.h"
#include "report/cuda_snapshot_trace.h"
#include "report/pickle_reader.h"

namespace memseal {

namespace {

const report::CudaDeviceTrace& chosenDevice(const report::CudaSnapshotTrace& trace, int device) {
  if (trace.devices.empty() && trace.host_traces > 0) {
    throw std::invalid_argument(
        "it holds no CUDA device's trace, only the host's (the run allocated nothing on a GPU); "
        "whatif replays PyTorch's CUDA caching allocator");
  }
  if (trace.devices.empty()) {
    throw std::invalid_argument(
        "its trace holds no allocation (record with "
        "torch.cuda.memory._record_memory_history() before the run's allocations)");
  }
  if (device < 0) return trace.devices.front();
  for (const report::CudaDeviceTrace& each : trace.devices) {
    if (each.device == device) return each;
  }
  throw std::invalid_argument("its trace holds no allocation on device " + std::to_string(device));
}

WhatIfSetting replayed(const std::string& name, const explain::CudaAllocatorSettings& settings,
                       const report::CudaDeviceTrace& trace, std::uint64_t device_bytes) {
  explain::CudaAllocatorReplay replay =
      explain::replayCudaAllocator(trace.events, settings, device_bytes);
  WhatIfSetting row;
  row.setting = name;
  row.reserved_peak = replay.reserved_peak;
  row.allocated_peak = replay.allocated_peak;
  row.largest_free_block_at_peak = replay.at_reserved_peak.largest_free_block;
  row.out_of_memory_at = replay.out_of_memory_at;
  if (replay.at_out_of_memory) {
    row.reserved_at_out_of_memory = replay.at_out_of_memory->reserved;
    row.free_at_out_of_memory =
        replay.at_out_of_memory->reserved - replay.at_out_of_memory->allocated;
    row.largest_free_block_at_out_of_memory = replay.at_out_of_memory->largest_free_block;
  }
  row.cache_flushes = replay.cache_flushes;
  return row;
}

}  // namespace

WhatIfReport whatIfSnapshot(const std::string& snapshot, const std::string& source,
                            const WhatIfOptions& options) {
  // Each row is named as it was asked for: "expandable_segments:False" is the defaults, and says
  // so better than an empty name.
  const std::vector<std::string>& names =
      options.settings.empty() ? explain::suggestedAllocatorSettings() : options.settings;
  std::vector<explain::CudaAllocatorSettings> settings;
  for (const std::string& conf : names) {
    settings.push_back(explain::CudaAllocatorSettings::parse(conf));
  }
  report::CudaSnapshotTrace trace =
      report::cudaSnapshotTrace(report::readPlainPickle(snapshot, {"frames", "segments"}));
  const report::CudaDeviceTrace& chosen = chosenDevice(trace, options.device);
  explain::CudaAllocatorSettings recorded;
  std::vector<std::string> ignored;
  try {
    recorded = explain::CudaAllocatorSettings::parse(trace.allocator_conf, &ignored);
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(std::string("the run's own PYTORCH_CUDA_ALLOC_CONF: ") +
                                error.what());
  }
  WhatIfReport report;
  report.source = source;
  report.device = chosen.device;
  report.events = chosen.events.size();
  report.allocations = chosen.allocations;
  report.recorded_reserved_peak = chosen.recorded_reserved_peak;
  report.recorded_out_of_memory_at = chosen.out_of_memory_at;
  report.recorded_out_of_memory_requested = chosen.out_of_memory_requested;
  report.ignored_settings = ignored;
  report.device_bytes = options.device_bytes;
  if (options.device_bytes) {
    report.device_bytes_from = "given";
  } else if (chosen.out_of_memory_at) {
    report.device_bytes = chosen.reserved_at_out_of_memory + chosen.out_of_memory_device_free;
    report.device_bytes_from =
        "reserved at the out-of-memory error and the device's free memory then";
  }
  // Unlimited: more than any device holds (the model holds at most 4 PiB).
  std::uint64_t bytes = report.device_bytes.value_or(std::uint64_t{1} << 52);
  std::string recorded_text = recorded.text();
  report.settings.push_back(replayed(
      recorded_text.empty() ? "(as recorded: the defaults)" : "(as recorded) " + recorded_text,
      recorded, chosen, bytes));
  for (std::size_t i = 0; i < settings.size(); ++i) {
    // A suggestion the run already used would repeat the first row; a setting the user asked for
    // is replayed as asked.
    if (options.settings.empty() && settings[i].text() == recorded_text) continue;
    report.settings.push_back(replayed(names[i], settings[i], chosen, bytes));
  }
  return report;
}

}  // namespace memseal
