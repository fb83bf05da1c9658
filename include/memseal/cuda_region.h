// Planned memory on the GPU: a region whose CUDA allocations come from a private pool of PyTorch's
// caching allocator, one pool per key, as CUDA graphs keep theirs.
//
//   memseal::CudaRegion region;                                      // the current CUDA device
//   for (auto& batch : batches) {
//     torch::Tensor out;
//     region.run({batch}, [&] { out = model->forward(batch); });     // keyed by the batch's shape
//   }
//
// The first run under a key sizes its pool: every allocation the region's thread makes on the
// current stream goes there, and what the pool holds after that run is the key's plan. Later runs
// under the key reuse the pool's blocks, so a steady loop asks the device for no new memory
// (cudaMalloc) and its requests never mix with other work's blocks (no fragmentation between
// shapes). The invariants of the CPU arena (memseal/arena.h) hold: the caching allocator never
// hands out a block that is live, so nothing overlaps; a run that needs more than its plan (a
// larger input under the same key) is served by growing the pool, never refused, and is counted
// as a mismatch; tensors still alive when a run ends (its outputs) stay valid, also after the
// region is destroyed (the allocator frees a released pool's memory once its last block is free).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>

#include "memseal/export.h"

namespace memseal {

struct CudaRegionOptions {
  int device = -1;  // CUDA device index; -1: the current device when the region is made
  // Print the first mismatch of each key to stderr (always counted in the statistics).
  bool warn_on_mismatch = true;
};

struct CudaRegionKeyStats {
  std::int64_t runs = 0;
  std::int64_t planned_bytes = 0;   // what the pool reserved after the key's first run
  std::int64_t reserved_bytes = 0;  // what it reserves now (segments of the pool)
  // Runs after the first during which the device allocated new segments and the pool grew: the
  // run needed more than its plan (other threads' allocations never count here).
  std::int64_t mismatched_runs = 0;
};

struct CudaRegionStats {
  std::int64_t runs = 0;
  std::int64_t mismatched_runs = 0;
  std::int64_t reserved_bytes = 0;  // all pools
  std::map<std::string, CudaRegionKeyStats> keys;
};

class MEMSEAL_API CudaRegion {
 public:
  // Throws std::runtime_error when memseal was built without CUDA or no CUDA device is present.
  explicit CudaRegion(CudaRegionOptions options = {});
  // Releases the pools; memory held by tensors made in them stays until those tensors are freed.
  ~CudaRegion();
  CudaRegion(const CudaRegion&) = delete;
  CudaRegion& operator=(const CudaRegion&) = delete;

  // Runs `region` on this thread with its allocations on the device's current stream served from
  // the pool of `key`. Allocations of other threads and other streams use the normal pools.
  // Regions do not nest on a thread (std::logic_error); an empty `region` is std::invalid_argument.
  // An exception from `region` ends the run and propagates.
  void run(const std::string& key, c10::function_ref<void()> region);
  // Keyed by the inputs' dtypes and shapes, as PlannedArena::keyFor gives them.
  void run(at::TensorList inputs, c10::function_ref<void()> region);

  CudaRegionStats stats() const;
  int device() const;

  // Whether memseal was built with CUDA and a CUDA device is present.
  static bool available();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memseal
