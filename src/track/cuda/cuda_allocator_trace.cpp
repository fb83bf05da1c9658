// The CUDA caching allocator's trace hook, turned into device events (track/device_events.h). Built
// only where libtorch has CUDA. The hook is attached once per process (libtorch cannot detach it)
// and does nothing while no session is active. It runs with the allocator's per-device lock held:
// it takes only the ledger's lock, captures no stack and never touches Python.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/torch_release.h"
#include "track/device_events.h"

namespace memseal::track {

namespace {

// The trace entries and the snapshot's segments and blocks are c10::cuda::CUDACachingAllocator's
// in libtorch 2.9 and 2.10, c10::CachingDeviceAllocator's from 2.11 on (which CUDACachingAllocator
// names again with using-declarations): these names reach both.
namespace cuda_allocator = c10::cuda::CUDACachingAllocator;

std::atomic<bool> g_attached{false};
// libtorch counts devices once per process: where it found none, no step boundary asks again (each
// asking took a lock and two calls into libc10_cuda, cold at every boundary).
std::atomic<bool> g_no_device{false};

bool kindOf(cuda_allocator::TraceEntry::Action action, track::DeviceEventKind& kind) {
  using Action = cuda_allocator::TraceEntry::Action;
  switch (action) {
    case Action::ALLOC:
      kind = track::DeviceEventKind::kBlockAlloc;
      return true;
    case Action::FREE_REQUESTED:
      kind = track::DeviceEventKind::kBlockFreeRequested;
      return true;
    case Action::FREE_COMPLETED:
      kind = track::DeviceEventKind::kBlockFreeCompleted;
      return true;
    case Action::SEGMENT_ALLOC:
      kind = track::DeviceEventKind::kSegmentAlloc;
      return true;
    case Action::SEGMENT_FREE:
      kind = track::DeviceEventKind::kSegmentFree;
      return true;
    case Action::SEGMENT_MAP:
      kind = track::DeviceEventKind::kSegmentMap;
      return true;
    case Action::SEGMENT_UNMAP:
      kind = track::DeviceEventKind::kSegmentUnmap;
      return true;
    case Action::OOM:
      kind = track::DeviceEventKind::kOutOfMemory;
      return true;
    default:  // SNAPSHOT: no memory change
      return false;
  }
}

void onTraceEntry(const cuda_allocator::TraceEntry& entry) {
  track::DeviceMemoryEvent event;
  if (!kindOf(entry.action_, event.kind)) return;
  event.device = entry.device_;
  event.bytes = entry.size_;
  event.stream = reinterpret_cast<std::uintptr_t>(entry.stream_);
  if (event.kind == track::DeviceEventKind::kOutOfMemory) {
    event.device_free_bytes = entry.addr_;  // for OOM the entry's address holds the free bytes
  } else {
    event.address = entry.addr_;
  }
  recordDeviceEvent(event);
}

// The segments of every pool, without the allocator's trace ring (which the snapshot() of libtorch
// 2.9 and 2.10 always copies: it has no include_traces argument yet).
cuda_allocator::SnapshotInfo takeSnapshot() {
#if MEMSEAL_TORCH_AT_LEAST(2, 11)
  return cuda_allocator::snapshot({0, 0}, /*include_traces=*/false);
#else
  return cuda_allocator::snapshot({0, 0});
#endif
}

}  // namespace

bool attachCudaAllocatorTrace() {
  if (g_attached.load(std::memory_order_acquire) || g_no_device.load(std::memory_order_relaxed)) {
    return false;
  }
  static std::mutex attaching;
  std::lock_guard<std::mutex> lock(attaching);
  if (g_attached.load(std::memory_order_relaxed)) return false;
  try {
    if (c10::cuda::device_count() == 0) {
      g_no_device.store(true, std::memory_order_relaxed);
      return false;
    }
    cuda_allocator::CUDAAllocator* allocator = cuda_allocator::get();
    // Trackers are handed to the per-device allocators that exist: attaching before CUDA is
    // initialised would attach to none. Sessions ask again at every step boundary.
    if (allocator == nullptr || !allocator->initialized()) return false;
    cuda_allocator::attachAllocatorTraceTracker(&onTraceEntry);
    g_attached.store(true, std::memory_order_release);
    // A child forked from here cannot use CUDA, which this process has initialised, and its copy
    // of the allocator's locks may be held by a thread it does not have: a session there (memseal
    // run's forked children) leaves device memory alone.
    pthread_atfork(nullptr, nullptr, [] {
      g_attached.store(false, std::memory_order_relaxed);
      g_no_device.store(true, std::memory_order_relaxed);
    });
    return true;
  } catch (...) {
    return false;  // no usable CUDA here: device events stay off
  }
}

void seedDeviceLedgerFromAllocator() {
  if (!g_attached.load(std::memory_order_acquire)) return;
  std::vector<track::DeviceSegmentSeed> seeds;
  try {
    // Taken outside the ledger's lock: the snapshot takes each device allocator's lock, under
    // which the hook takes the ledger's. Events between the snapshot and the seeding are applied
    // first, and seeding skips what they made known.
    cuda_allocator::SnapshotInfo snapshot = takeSnapshot();
    seeds.reserve(snapshot.segments.size());
    for (const cuda_allocator::SegmentInfo& segment : snapshot.segments) {
      track::DeviceSegmentSeed seed;
      seed.device = segment.device;
      seed.address = segment.address;
      seed.bytes = segment.total_size;
      seed.stream = reinterpret_cast<std::uintptr_t>(segment.stream);
      seed.expandable = segment.is_expandable;
      std::uint64_t address = segment.address;  // blocks tile their segment in address order
      for (const cuda_allocator::BlockInfo& block : segment.blocks) {
        if (block.allocated) seed.allocated_blocks.emplace_back(address, block.size);
        address += block.size;
      }
      seeds.push_back(std::move(seed));
    }
  } catch (...) {
    return;  // no snapshot: the ledger learns from events alone
  }
  seedDeviceLedger(seeds);
}

bool cudaAllocatorTraceAttached() { return g_attached.load(std::memory_order_acquire); }

void releaseCachedDeviceMemory() {
  if (!g_attached.load(std::memory_order_acquire)) return;
  try {
    cuda_allocator::emptyCache();
  } catch (...) {
    // Nothing given back: the next step's reserved bytes include the cache, as they would anyway.
  }
}

std::uint64_t deviceMemoryForProcess(int device) {
  if (!g_attached.load(std::memory_order_acquire) || device < 0) return 0;
  try {
    auto index = static_cast<c10::DeviceIndex>(device);
    std::pair<std::size_t, std::size_t> free_and_total =
        cuda_allocator::get()->getMemoryInfo(index);
    using c10::CachingAllocator::StatType;
    std::int64_t reserved = cuda_allocator::getDeviceStats(index)
                                .reserved_bytes[static_cast<std::size_t>(StatType::AGGREGATE)]
                                .current;
    return free_and_total.first + static_cast<std::uint64_t>(std::max<std::int64_t>(reserved, 0));
  } catch (...) {
    return 0;
  }
}

}  // namespace memseal::track
