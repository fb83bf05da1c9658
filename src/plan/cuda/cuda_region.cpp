// CudaRegion: a region's CUDA allocations into a private pool of the caching allocator, one pool
// per key. Built only where libtorch has CUDA (plan/cuda_region_unavailable.cpp otherwise).
//
// Invariants, as the CPU arena's (plan/planned_arena.cpp):
// - No overlap with live memory: the blocks come from the caching allocator itself, which never
//   hands out a live block; memseal computes no offsets on the GPU.
// - Safe fallback: a run that needs more than its pool holds is served by the pool growing (a new
//   segment), never refused; the run is counted as mismatched and the first of each key is said.
// - Outputs stay valid: a block is the pool's until freed, and a released pool lives until its last
//   block is free, so tensors made in a run outlive the run and the region.
// - Only this thread's allocations on the stream current when the run began go to the pool (the
//   filter of beginAllocateToPool): other threads and streams keep the normal pools.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_release.h"
#if MEMSEAL_TORCH_AT_LEAST(2, 10)
#include <ATen/cuda/MemPool.h>
#endif

#include <cstdio>
#include <mutex>
#include <stdexcept>

#include "common/text.h"
#include "memseal/arena.h"
#include "memseal/cuda_region.h"

namespace memseal {

namespace {

// A private pool of the caching allocator: at::cuda::MemPool (ATen/cuda/MemPool.h) from libtorch
// 2.10 on, c10::cuda::MemPool (c10/cuda/CUDACachingAllocator.h) in 2.9.
#if MEMSEAL_TORCH_AT_LEAST(2, 10)
using CudaMemPool = at::cuda::MemPool;
#else
using CudaMemPool = c10::cuda::MemPool;
#endif

thread_local bool t_in_cuda_region = false;

class InCudaRegionGuard {
 public:
  InCudaRegionGuard() {
    if (t_in_cuda_region) {
      throw std::logic_error("memseal: CudaRegion runs do not nest on one thread");
    }
    t_in_cuda_region = true;
  }
  ~InCudaRegionGuard() { t_in_cuda_region = false; }
  InCudaRegionGuard(const InCudaRegionGuard&) = delete;
  InCudaRegionGuard& operator=(const InCudaRegionGuard&) = delete;
};

// Segments the device has allocated so far, over all pools: a run during which this does not rise
// asked the driver for nothing.
std::int64_t segmentsAllocated(c10::DeviceIndex device) {
  using c10::CachingAllocator::StatType;
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device)
      .segment[static_cast<std::size_t>(StatType::AGGREGATE)]
      .allocated;
}

std::int64_t poolReservedBytes(c10::MempoolId_t pool) {
  std::int64_t bytes = 0;
  // Only the segments, of this pool (without the trace ring, from libtorch 2.11 on: the snapshot()
  // of 2.9 and 2.10 has no include_traces argument and always copies it).
#if MEMSEAL_TORCH_AT_LEAST(2, 11)
  auto snapshot = c10::cuda::CUDACachingAllocator::snapshot(pool, /*include_traces=*/false);
#else
  auto snapshot = c10::cuda::CUDACachingAllocator::snapshot(pool);
#endif
  for (const auto& segment : snapshot.segments) {
    if (segment.owner_private_pool_id == pool)
      bytes += static_cast<std::int64_t>(segment.total_size);
  }
  return bytes;
}

}  // namespace

struct CudaRegion::Impl {
  struct Key {
    std::unique_ptr<CudaMemPool> pool;
    CudaRegionKeyStats stats;
    bool warned = false;
  };
  CudaRegionOptions options;
  c10::DeviceIndex device = 0;
  mutable std::mutex mutex;  // the key table and statistics; never held while a region runs
  std::map<std::string, Key> keys;
};

bool CudaRegion::available() {
  try {
    return c10::cuda::device_count() > 0;
  } catch (...) {
    return false;
  }
}

CudaRegion::CudaRegion(CudaRegionOptions options) : impl_(std::make_unique<Impl>()) {
  if (!available()) {
    throw std::runtime_error(
        "memseal: CudaRegion needs a CUDA device, and none was found (CPU inference: use "
        "memseal::PlannedArena)");
  }
  int count = c10::cuda::device_count();
  if (options.device >= count) {
    throw std::invalid_argument("memseal: CudaRegion for cuda:" + std::to_string(options.device) +
                                ", but this machine has " + std::to_string(count) +
                                " CUDA device(s)");
  }
  impl_->options = options;
  impl_->device = options.device >= 0 ? static_cast<c10::DeviceIndex>(options.device)
                                      : c10::cuda::current_device();
}

CudaRegion::~CudaRegion() {
  // MemPool's destructor releases the pool; blocks still held by tensors keep it until freed.
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->keys.clear();
}

int CudaRegion::device() const { return impl_->device; }

void CudaRegion::run(const std::string& key, c10::function_ref<void()> region) {
  if (!region) throw std::invalid_argument("memseal: CudaRegion::run needs a region to run");
  InCudaRegionGuard in_region;
  c10::DeviceIndex device = impl_->device;
  c10::cuda::CUDAGuard device_guard(device);
  CudaMemPool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    Impl::Key& entry = impl_->keys[key];
    if (!entry.pool) entry.pool = std::make_unique<CudaMemPool>();
    pool = entry.pool.get();
  }
  c10::MempoolId_t pool_id = pool->id();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(device).stream();
  std::int64_t segments_before = segmentsAllocated(device);
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(
      device, pool_id, [stream](cudaStream_t candidate) { return candidate == stream; });
  try {
    region();
  } catch (...) {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool_id);
    throw;
  }
  c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool_id);
  bool device_grew = segmentsAllocated(device) != segments_before;
  // Only then is the pool's size read (a snapshot takes the allocator's lock and copies segments).
  std::int64_t reserved = device_grew ? poolReservedBytes(pool_id) : -1;
  std::string warning;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    Impl::Key& entry = impl_->keys[key];
    CudaRegionKeyStats& stats = entry.stats;
    ++stats.runs;
    if (stats.runs == 1) {
      stats.planned_bytes = reserved >= 0 ? reserved : poolReservedBytes(pool_id);
      stats.reserved_bytes = stats.planned_bytes;
    } else if (reserved > stats.reserved_bytes) {
      ++stats.mismatched_runs;
      if (impl_->options.warn_on_mismatch && !entry.warned) {
        entry.warned = true;
        warning = "memseal: CudaRegion key '" + key + "' needed more than its plan (" +
                  common::bytesText(stats.planned_bytes) + "): its pool grew to " +
                  common::bytesText(reserved) +
                  "; a larger input under the same key costs new device memory, key it apart";
      }
      stats.reserved_bytes = reserved;
    }
  }
  if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
}

void CudaRegion::run(at::TensorList inputs, c10::function_ref<void()> region) {
  run(PlannedArena::keyFor(inputs), region);
}

CudaRegionStats CudaRegion::stats() const {
  CudaRegionStats stats;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (const auto& [key, entry] : impl_->keys) {
    stats.keys[key] = entry.stats;
    stats.runs += entry.stats.runs;
    stats.mismatched_runs += entry.stats.mismatched_runs;
    stats.reserved_bytes += entry.stats.reserved_bytes;
  }
  return stats;
}

}  // namespace memseal
