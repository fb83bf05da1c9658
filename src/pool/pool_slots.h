// A TensorPool's classes, buckets and buffers, and how a request takes a buffer: a free one of the
// smallest bucket that fits, else of a larger one, else what the class's policy says when every
// one is leased (fail, grow or wait). Every function here runs under the class's lock.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memseal/pool.h"
#include "pool/bucket_grid.h"

namespace memseal {

namespace detail {

struct PoolClass;
struct PoolBucket;

struct PoolSlot {
  at::Tensor buffer;
  PoolBucket* bucket = nullptr;
  bool leased = false;
  bool held = false;      // released while its tensor was still referenced elsewhere
  bool recorded = false;  // the tracker keeps a record of its lease (see track/pool_leases.h)
};

struct PoolBucket {
  PoolClass* owner = nullptr;
  std::vector<std::int64_t> shape;
  std::size_t buffer_bytes = 0;
  std::deque<PoolSlot> slots;    // stable addresses: leases point at their slot
  std::vector<PoolSlot*> free;   // reserved to the number of slots: releasing never allocates
  std::uint32_t lease_name = 0;  // interned "memseal::TensorPool lease 'name' [shape]"
  PoolBucketStats stats;
};

struct PoolClass {
  TensorClassOptions options;
  pool::BucketGrid grid;
  at::TensorOptions tensor_options;
  std::vector<std::unique_ptr<PoolBucket>> buckets;
  mutable std::mutex mutex;
  std::condition_variable released;

  PoolClass(TensorClassOptions class_options, pool::BucketGrid bucket_grid)
      : options(std::move(class_options)), grid(std::move(bucket_grid)) {}
};

struct PoolCore {
  std::vector<std::unique_ptr<PoolClass>> classes;
  std::atomic<std::int64_t> oversize_acquisitions{0};
};

}  // namespace detail

namespace pool {

using detail::PoolBucket;
using detail::PoolClass;
using detail::PoolSlot;

// "'name'", as messages name the class.
std::string classLabel(const PoolClass& pool_class);
// A new buffer in `bucket`. The buffer is made first: if that throws, nothing has changed.
PoolSlot& addSlot(PoolBucket& bucket);
// A free buffer for `request` (its sizes): of the bucket `smallest` (the smallest that fits), else
// of the smallest larger one that fits and has one; null when none has.
PoolSlot* takeFitting(PoolClass& pool_class, std::size_t smallest, const std::int64_t* request);
// No free buffer fits: what the class's policy does (fail, grow or wait; `lock` holds the class's
// lock, released while waiting). Throws PoolExhaustedError when it gives none.
PoolSlot* slotWhenExhausted(PoolClass& pool_class, std::size_t smallest, at::IntArrayRef shape,
                            std::unique_lock<std::mutex>& lock);

}  // namespace pool
}  // namespace memseal
