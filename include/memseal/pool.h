// Pools of pre-allocated tensors for servers: a request leases a buffer instead of allocating one,
// and the buffer comes back when the lease goes out of scope.
//
//   memseal::TensorPool pool({{"input", {{1, 2, 4, 8, 16, 32}, {64, 128, 256, 512}}}});
//   {
//     memseal::TensorLease input = pool.acquire("input", {3, 100});  // a [3, 100] view of [4, 128]
//     input->copy_(request);
//     ...
//   }  // the buffer is free again (also when an exception unwinds)
//
// Buffers are made when the pool is made (and when a class grows, by policy); acquiring and
// releasing allocate no tensor memory. The leak detector and lifetime scopes understand pools: a
// pool's buffers are never reported, a lease held across steps (or past a scope) is, named by its
// class.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "memseal/export.h"

namespace memseal {

// What acquire() does when every buffer of the bucket a request needs (and of every larger bucket
// that would fit it) is leased.
enum class PoolExhaustion {
  kWait,  // wait for a release, at most TensorClassOptions::wait_timeout, then PoolExhaustedError
  kGrow,  // add a buffer to the bucket (counted), up to max_buffers_per_bucket; a request larger
          // than every bucket gets a buffer of its own shape, freed when its lease ends (counted)
  kFail,  // PoolExhaustedError at once
};

struct TensorClassOptions {
  std::string name;  // unique in its pool; names it in errors, statistics and leak reports
  // For each dimension, the sizes a buffer may have, ascending: {{1, 2, 4, 8}, {64, 128}} makes
  // eight buckets ([1, 64] ... [8, 128]); {{32}, {512}} makes one. A request gets a view of
  // exactly its shape on the smallest bucket that fits it in every dimension.
  std::vector<std::vector<std::int64_t>> sizes;
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Page-locked host memory, which devices copy from asynchronously. Where CUDA is absent the
  // buffers are ordinary host memory, and the pool says so once on stderr.
  bool pinned = false;
  std::size_t capacity = 2;  // buffers per bucket, made up front
  PoolExhaustion on_exhausted = PoolExhaustion::kWait;
  std::chrono::milliseconds wait_timeout{1000};
  std::size_t max_buffers_per_bucket = std::numeric_limits<std::size_t>::max();  // kGrow's bound
};

// Per bucket; counters since the pool was made.
struct PoolBucketStats {
  std::string class_name;
  std::vector<std::int64_t> shape;  // the bucket's buffer shape
  std::size_t buffers = 0;          // capacity plus grown buffers
  std::size_t leases_out = 0;
  std::size_t leases_high_water = 0;  // most leases out at once
  std::int64_t acquisitions = 0;
  std::int64_t waits = 0;  // acquisitions that found the bucket exhausted and waited
  std::int64_t wait_ns = 0;
  std::int64_t max_wait_ns = 0;
  std::int64_t grows = 0;
  std::int64_t failures = 0;  // PoolExhaustedError, timeouts included
  // Leases released while something else still referenced their tensor: that buffer stays out of
  // service until the reference goes, so the holder's memory is never handed to someone else.
  std::int64_t held_after_release = 0;
  std::size_t bytes_held = 0;  // memory of all its buffers
  bool pinned = false;         // page-locked (asked for, and CUDA present)
};

struct MEMSEAL_API PoolStats {
  std::vector<PoolBucketStats> buckets;    // in class order, then bucket order
  std::int64_t oversize_acquisitions = 0;  // kGrow: requests larger than every bucket
  std::size_t bytes_held = 0;
  std::string toText() const;  // one line per bucket used or grown, with a header
};

class MEMSEAL_API PoolExhaustedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
struct PoolCore;
struct PoolSlot;
}  // namespace detail

// Owns a leased buffer's view. Movable, not copyable; releasing twice is impossible by design.
// Copying tensor() out of it and keeping the copy after the lease ends is safe: the pool notices
// and keeps that buffer out of service until the copy is gone
// (PoolBucketStats::held_after_release).
class MEMSEAL_API TensorLease {
 public:
  TensorLease() = default;
  TensorLease(TensorLease&& other) noexcept;
  TensorLease& operator=(TensorLease&& other) noexcept;
  TensorLease(const TensorLease&) = delete;
  TensorLease& operator=(const TensorLease&) = delete;
  ~TensorLease() { release(); }

  // A contiguous tensor of exactly the requested shape, at the start of the buffer.
  const at::Tensor& tensor() const { return view_; }
  const at::Tensor& operator*() const { return view_; }
  const at::Tensor* operator->() const { return &view_; }
  explicit operator bool() const { return slot_ != nullptr || oversize_; }
  // The buffer's whole shape (the bucket); the request's shape for an oversize lease.
  std::vector<std::int64_t> bucketShape() const;
  // Gives the buffer back now; later calls (and the destructor) do nothing.
  void release() noexcept;

 private:
  friend class TensorPool;
  std::shared_ptr<detail::PoolCore> core_;
  detail::PoolSlot* slot_ = nullptr;
  bool oversize_ = false;
  at::Tensor view_;
};

// Thread-safe: any thread may acquire, and leases may end on any thread. A buffer is free again
// as soon as its lease ends, whatever a device still does with it: on a GPU, use one pool's leases
// on one stream, or synchronise before a lease ends. Growing makes the buffer under its class's
// lock. A thread still waiting in acquire() when the pool is destroyed waits out its timeout.
class MEMSEAL_API TensorPool {
 public:
  // Makes every class's buffers now. std::invalid_argument on options that cannot work (no name,
  // a name used twice, sizes not ascending or not positive, no dimension, capacity 0, a device
  // that is not available), naming the class.
  explicit TensorPool(std::vector<TensorClassOptions> classes);
  // Leases still out are reported on stderr; their buffers stay valid until they are released.
  ~TensorPool();
  TensorPool(const TensorPool&) = delete;
  TensorPool& operator=(const TensorPool&) = delete;

  // A lease of `shape` from class `class_name`. std::invalid_argument for an unknown class or a
  // shape of another rank; PoolExhaustedError (naming the class, bucket, capacity and leases out)
  // when the request is larger than every bucket, or the bucket is exhausted, by policy.
  TensorLease acquire(std::string_view class_name, at::IntArrayRef shape);
  // As acquire(), but an empty lease instead of waiting, growing or failing when exhausted.
  TensorLease tryAcquire(std::string_view class_name, at::IntArrayRef shape);

  PoolStats stats() const;

 private:
  TensorLease acquireWith(std::string_view class_name, at::IntArrayRef shape,
                          bool may_block_or_grow);

  std::shared_ptr<detail::PoolCore> core_;
};

}  // namespace memseal
