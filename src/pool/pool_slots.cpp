#include "pool/pool_slots.h"

#include <ATen/ops/empty.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "common/text.h"
#include "track/pool_leases.h"

namespace memseal::pool {

std::string classLabel(const PoolClass& pool_class) { return "'" + pool_class.options.name + "'"; }

namespace {

// A buffer, made outside inference mode so that leases work in and out of it, and marked so that
// leak analysis looks at its leases instead.
at::Tensor makeBuffer(const PoolClass& pool_class, const std::vector<std::int64_t>& shape) {
  c10::InferenceMode normal_tensors(/*enabled=*/false);
  at::Tensor buffer;
  try {
    buffer = at::empty(shape, pool_class.tensor_options);
  } catch (const c10::Error& error) {
    throw std::invalid_argument(
        "memseal: TensorPool class " + classLabel(pool_class) + ": cannot make a buffer of shape " +
        common::shapeText(shape.data(), shape.size()) + " on " + pool_class.options.device.str() +
        ": " + error.what_without_backtrace());
  }
  track::markPoolBuffer(buffer);
  return buffer;
}

// A free slot of `bucket`, taking back held slots whose outside references are gone.
PoolSlot* takeFree(PoolBucket& bucket) {
  if (bucket.free.empty()) {
    for (PoolSlot& slot : bucket.slots) {
      if (slot.held && slot.buffer.storage().use_count() == 1) {
        slot.held = false;
        // The lease's record stayed while its tensor was kept (leak analysis sees it): now over.
        if (std::exchange(slot.recorded, false)) {
          track::endLease(slot.buffer.storage().data_ptr().get());
        }
        bucket.free.push_back(&slot);
      }
    }
    if (bucket.free.empty()) return nullptr;
  }
  PoolSlot* slot = bucket.free.back();
  bucket.free.pop_back();
  return slot;
}

bool hasFree(const PoolBucket& bucket) {
  if (!bucket.free.empty()) return true;
  return std::any_of(bucket.slots.begin(), bucket.slots.end(), [](const PoolSlot& slot) {
    return slot.held && slot.buffer.storage().use_count() == 1;
  });
}

// Whether a bucket that fits the request holds a buffer whose outside reference may go.
bool anyHeldFitting(const PoolClass& pool_class, const std::int64_t* request) {
  for (std::size_t i = 0; i < pool_class.buckets.size(); ++i) {
    if (!pool_class.grid.fits(i, request)) continue;
    const PoolBucket& bucket = *pool_class.buckets[i];
    if (std::any_of(bucket.slots.begin(), bucket.slots.end(),
                    [](const PoolSlot& slot) { return slot.held; })) {
      return true;
    }
  }
  return false;
}

std::string exhaustedMessage(const PoolClass& pool_class, const PoolBucket& bucket,
                             at::IntArrayRef request, const std::string& what) {
  return "memseal: TensorPool class " + classLabel(pool_class) + " is exhausted for " +
         common::shapeText(request.data(), request.size()) + ": every buffer of bucket " +
         common::shapeText(bucket.shape.data(), bucket.shape.size()) + " (capacity " +
         std::to_string(pool_class.options.capacity) + ", " + std::to_string(bucket.slots.size()) +
         " buffers, " + std::to_string(bucket.stats.leases_out) +
         " leases out) and of the larger buckets that fit is leased; " + what;
}

// PoolExhaustion::kGrow: a new buffer in the wanted bucket, up to max_buffers_per_bucket.
PoolSlot* growBucket(PoolClass& pool_class, PoolBucket& wanted, at::IntArrayRef shape) {
  const TensorClassOptions& options = pool_class.options;
  if (wanted.slots.size() >= options.max_buffers_per_bucket) {
    ++wanted.stats.failures;
    throw PoolExhaustedError(exhaustedMessage(pool_class, wanted, shape,
                                              "it may not grow beyond max_buffers_per_bucket (" +
                                                  std::to_string(options.max_buffers_per_bucket) +
                                                  ")"));
  }
  PoolSlot* slot = nullptr;
  try {
    slot = &addSlot(wanted);
  } catch (const std::exception& error) {
    ++wanted.stats.failures;
    throw PoolExhaustedError(exhaustedMessage(pool_class, wanted, shape,
                                              std::string("growing failed: ") + error.what()));
  }
  ++wanted.stats.grows;
  return slot;
}

// PoolExhaustion::kWait: a fitting buffer released within wait_timeout (the class's lock held by
// `lock`, released while waiting).
PoolSlot* waitForSlot(PoolClass& pool_class, PoolBucket& wanted, std::size_t smallest,
                      at::IntArrayRef shape, std::unique_lock<std::mutex>& lock) {
  const TensorClassOptions& options = pool_class.options;
  ++wanted.stats.waits;
  auto started = std::chrono::steady_clock::now();
  // Clamped, so that a timeout of "forever" cannot overflow the clock.
  auto deadline = started + std::min<std::chrono::milliseconds>(options.wait_timeout,
                                                                std::chrono::hours(24 * 365));
  PoolSlot* slot = nullptr;
  while (slot == nullptr) {
    // A held buffer comes back when its outside reference goes, which signals nothing: while any
    // is held, look again every few milliseconds.
    auto until =
        anyHeldFitting(pool_class, shape.data())
            ? std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(5))
            : deadline;
    bool timed_out = pool_class.released.wait_until(lock, until) == std::cv_status::timeout &&
                     std::chrono::steady_clock::now() >= deadline;
    slot = takeFitting(pool_class, smallest, shape.data());
    if (slot == nullptr && timed_out) break;
  }
  auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - started)
                    .count();
  wanted.stats.wait_ns += waited;
  wanted.stats.max_wait_ns = std::max<std::int64_t>(wanted.stats.max_wait_ns, waited);
  if (slot == nullptr) {
    ++wanted.stats.failures;
    throw PoolExhaustedError(exhaustedMessage(
        pool_class, wanted, shape,
        "waited " + std::to_string(options.wait_timeout.count()) +
            " ms: raise capacity, release leases sooner, or use PoolExhaustion::kGrow"));
  }
  return slot;
}

}  // namespace

PoolSlot& addSlot(PoolBucket& bucket) {
  at::Tensor buffer = makeBuffer(*bucket.owner, bucket.shape);
  bucket.free.reserve(bucket.slots.size() + 1);  // releasing never allocates
  PoolSlot& slot = bucket.slots.emplace_back();
  slot.bucket = &bucket;
  slot.buffer = std::move(buffer);
  bucket.stats.buffers = bucket.slots.size();
  bucket.stats.bytes_held += bucket.buffer_bytes;
  return slot;
}

PoolSlot* takeFitting(PoolClass& pool_class, std::size_t smallest, const std::int64_t* request) {
  if (PoolSlot* slot = takeFree(*pool_class.buckets[smallest])) return slot;
  std::size_t best = pool::BucketGrid::kNone;
  for (std::size_t i = 0; i < pool_class.buckets.size(); ++i) {
    if (i == smallest || !pool_class.grid.fits(i, request) || !hasFree(*pool_class.buckets[i])) {
      continue;
    }
    if (best == pool::BucketGrid::kNone ||
        pool_class.grid.elements(i) < pool_class.grid.elements(best)) {
      best = i;
    }
  }
  return best == pool::BucketGrid::kNone ? nullptr : takeFree(*pool_class.buckets[best]);
}

PoolSlot* slotWhenExhausted(PoolClass& pool_class, std::size_t smallest, at::IntArrayRef shape,
                            std::unique_lock<std::mutex>& lock) {
  PoolBucket& wanted = *pool_class.buckets[smallest];
  switch (pool_class.options.on_exhausted) {
    case PoolExhaustion::kFail:
      ++wanted.stats.failures;
      throw PoolExhaustedError(exhaustedMessage(
          pool_class, wanted, shape,
          "the policy is to fail (PoolExhaustion::kFail): raise capacity or release leases "
          "sooner"));
    case PoolExhaustion::kGrow:
      return growBucket(pool_class, wanted, shape);
    case PoolExhaustion::kWait:
      return waitForSlot(pool_class, wanted, smallest, shape, lock);
  }
  return nullptr;
}

}  // namespace memseal::pool
