// The allocations of a CUDA memory snapshot's trace (torch.cuda.memory._dump_snapshot after
// _record_memory_history, or memseal's own --memory-viz), as the allocator model replays them
// (explain/cuda_allocator_model.h), with what the allocator itself recorded beside them: its
// reserved peak, and the out-of-memory error where one ended the trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "explain/cuda_allocator_model.h"

namespace memseal::report {

struct CudaDeviceTrace {
  int device = 0;
  std::vector<explain::CudaAllocatorEvent> events;
  std::size_t allocations = 0;
  // From the trace's segment events: the most the allocator reserved while it recorded.
  std::uint64_t recorded_reserved_peak = 0;
  // The first out-of-memory error, which ends the events: the request that failed (the last
  // event, an allocation), the bytes it asked for and the device's free memory then, and what
  // the allocator had reserved.
  std::optional<std::size_t> out_of_memory_at;
  std::uint64_t out_of_memory_requested = 0;
  std::uint64_t out_of_memory_device_free = 0;
  std::uint64_t reserved_at_out_of_memory = 0;
};

struct CudaSnapshotTrace {
  std::vector<CudaDeviceTrace> devices;  // those whose trace holds an allocation
  // Traces of memory no caching allocator holds (memseal's --memory-viz names the host "cpu"),
  // left out of `devices`.
  std::size_t host_traces = 0;
  // PYTORCH_CUDA_ALLOC_CONF as the snapshot recorded it; empty where it did not.
  std::string allocator_conf;
};

// Throws std::invalid_argument naming what is missing or of the wrong type.
CudaSnapshotTrace cudaSnapshotTrace(const nlohmann::json& snapshot);

}  // namespace memseal::report
