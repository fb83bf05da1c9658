// What the tracker keeps for each live allocation. Plain data, so the live table can move records
// freely; the tensor is held through a raw weak reference that the engine takes and drops.
#pragma once

#include <cstddef>
#include <cstdint>

namespace c10 {
struct TensorImpl;
}

namespace memseal::track {

constexpr int kMaxCachedDims = 6;

// The tensor that owned the storage when the op that made it returned.
struct TensorSignature {
  std::int64_t sizes[kMaxCachedDims];
  std::int8_t dims = -1;  // -1: no op output owned this storage (yet); > kMaxCachedDims: cut
  std::int8_t scalar_type = -1;
  bool requires_grad = false;
  bool is_leaf = true;
  std::uint32_t grad_fn_name = 0;  // interned string id, 0 when none
};

enum RecordFlags : std::uint8_t {
  kGradMode = 1u << 0,
  kInferenceMode = 1u << 1,
  kPoolBuffer = 1u << 2,  // a TensorPool's buffer: its leases are what leak analysis looks at
  // A block of the CUDA caching allocator, recorded from its trace hook (track/device_tensors.h):
  // no deleter of ours, removed when the allocator reports the block's free.
  kDeviceBlock = 1u << 3,
  // A device block whose site still lacks the stack: the hook runs under the allocator's lock and
  // names the op only; the op's end, outside that lock, completes the site.
  kDeviceSitePending = 1u << 4,
};

struct LiveRecord {
  void* data = nullptr;  // the key; nullptr marks an empty slot
  void* original_context = nullptr;
  void (*original_deleter)(void*) = nullptr;
  std::size_t bytes = 0;
  std::int64_t time_ns = 0;
  c10::TensorImpl* tensor = nullptr;  // weak reference, or nullptr
  std::uint64_t thread_serial = 0;    // per-thread allocation counter at allocation time
  std::uint32_t thread_slot = 0;
  std::uint32_t site = 0;
  std::uint32_t step = 0;
  std::uint32_t session = 0;
  std::uint32_t lifetime_scope = 0;  // the LifetimeScope active at allocation, 0 when none
  std::uint8_t flags = 0;
  std::int8_t cuda_device = -1;  // the CUDA device of a kDeviceBlock record, -1 for CPU memory
  TensorSignature signature;
};

}  // namespace memseal::track
