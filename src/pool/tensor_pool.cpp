// One mutex per class guards its buckets' free lists and counters: an acquire or release holds it
// for a few pointer moves, and waiting uses the class's condition variable. Leases and the pool
// share the core, so buffers outlive the pool while leases are out. A lease's tensor is a
// TensorImpl made directly on the buffer's storage: no dispatcher call, no tensor allocation.
#include "memseal/pool.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <sstream>
#include <utility>

#include "common/text.h"
#include "pool/bucket_grid.h"
#include "pool/pool_slots.h"
#include "track/pool_leases.h"

namespace memseal {

namespace {

using detail::PoolBucket;
using detail::PoolClass;
using detail::PoolCore;
using detail::PoolSlot;
using pool::addSlot;
using pool::classLabel;
using pool::slotWhenExhausted;
using pool::takeFitting;

bool pinnedMemoryAvailable() {
  static const bool available = at::globalContext().hasCUDA();
  return available;
}

void sayPinnedFallbackOnce() {
  static std::once_flag said;
  std::call_once(said, [] {
    std::cerr << "memseal: CUDA is not available: pinned pool buffers and staging use ordinary "
                 "host memory (copies are synchronous)\n";
  });
}

// A contiguous tensor of `shape` at the start of the buffer's storage.
at::Tensor viewOf(const at::Tensor& buffer, at::IntArrayRef shape) {
  // A normal tensor, also when acquired in inference mode, so it may be written outside it too.
  c10::InferenceMode normal_tensors(/*enabled=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(buffer.storage()), buffer.key_set(),
                                                   buffer.dtype());
  impl->set_sizes_contiguous(shape);
  return at::Tensor(std::move(impl));
}

void validate(const TensorClassOptions& options) {
  std::string label = "memseal: TensorPool class '" + options.name + "': ";
  if (options.name.empty()) throw std::invalid_argument("memseal: TensorPool class has no name");
  if (options.capacity == 0) throw std::invalid_argument(label + "capacity must be at least 1");
  if (options.max_buffers_per_bucket < options.capacity) {
    throw std::invalid_argument(label + "max_buffers_per_bucket (" +
                                std::to_string(options.max_buffers_per_bucket) +
                                ") is below capacity (" + std::to_string(options.capacity) + ")");
  }
  if (options.wait_timeout.count() < 0) {
    throw std::invalid_argument(label + "wait_timeout is negative");
  }
  if (options.pinned && options.device.type() != c10::DeviceType::CPU) {
    throw std::invalid_argument(label + "pinned buffers are host memory; device is " +
                                options.device.str());
  }
}

// The class a request names; std::invalid_argument listing the classes when there is none.
PoolClass& classNamed(PoolCore& core, std::string_view class_name) {
  for (const auto& pool_class : core.classes) {
    if (pool_class->options.name == class_name) return *pool_class;
  }
  std::string names;
  for (const auto& pool_class : core.classes) {
    names += (names.empty() ? "" : ", ") + classLabel(*pool_class);
  }
  throw std::invalid_argument("memseal: TensorPool has no class '" + std::string(class_name) +
                              "' (it has " + names + ")");
}

// std::invalid_argument for a request the class cannot hold whatever its buckets: another rank, a
// negative size.
void checkRequest(const PoolClass& pool_class, at::IntArrayRef shape) {
  if (shape.size() != pool_class.grid.rank()) {
    throw std::invalid_argument(
        "memseal: TensorPool class " + classLabel(pool_class) + " holds " +
        std::to_string(pool_class.grid.rank()) + "-dimensional tensors; the request " +
        common::shapeText(shape.data(), shape.size()) + " has " + std::to_string(shape.size()));
  }
  for (std::int64_t size : shape) {
    if (size < 0) {
      throw std::invalid_argument("memseal: TensorPool class " + classLabel(pool_class) +
                                  ": negative size in request " +
                                  common::shapeText(shape.data(), shape.size()));
    }
  }
}

}  // namespace

TensorLease::TensorLease(TensorLease&& other) noexcept
    : core_(std::move(other.core_)),
      slot_(std::exchange(other.slot_, nullptr)),
      oversize_(std::exchange(other.oversize_, false)),
      view_(std::move(other.view_)) {}

TensorLease& TensorLease::operator=(TensorLease&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    slot_ = std::exchange(other.slot_, nullptr);
    oversize_ = std::exchange(other.oversize_, false);
    view_ = std::move(other.view_);
  }
  return *this;
}

std::vector<std::int64_t> TensorLease::bucketShape() const {
  if (slot_ != nullptr) return slot_->bucket->shape;
  return view_.defined() ? view_.sizes().vec() : std::vector<std::int64_t>{};
}

void TensorLease::release() noexcept {
  if (slot_ == nullptr) {
    view_.reset();
    oversize_ = false;
    core_.reset();
    return;
  }
  PoolSlot* slot = std::exchange(slot_, nullptr);
  view_.reset();
  PoolBucket& bucket = *slot->bucket;
  PoolClass& pool_class = *bucket.owner;
  {
    std::lock_guard<std::mutex> lock(pool_class.mutex);
    slot->leased = false;
    --bucket.stats.leases_out;
    // Someone kept the lease's tensor (or a view of it): handing the buffer to the next request
    // would change their data under them.
    // Its lease record stays until then, so leak analysis and scopes still see what is kept.
    if (slot->buffer.storage().use_count() > 1) {
      slot->held = true;
      ++bucket.stats.held_after_release;
    } else {
      if (std::exchange(slot->recorded, false)) {
        track::endLease(slot->buffer.storage().data_ptr().get());
      }
      bucket.free.push_back(slot);
    }
  }
  pool_class.released.notify_all();
  core_.reset();
}

TensorPool::TensorPool(std::vector<TensorClassOptions> classes)
    : core_(std::make_shared<PoolCore>()) {
  if (classes.empty()) throw std::invalid_argument("memseal: TensorPool needs at least one class");
  for (TensorClassOptions& options : classes) {
    validate(options);
    for (const auto& existing : core_->classes) {
      if (existing->options.name == options.name) {
        throw std::invalid_argument("memseal: TensorPool class '" + options.name +
                                    "' is defined twice");
      }
    }
    std::unique_ptr<PoolClass> pool_class;
    try {
      pool::BucketGrid grid(options.sizes);
      pool_class = std::make_unique<PoolClass>(std::move(options), std::move(grid));
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("memseal: TensorPool class '" + options.name +
                                  "': " + error.what());
    }
    bool pinned = pool_class->options.pinned;
    if (pinned && !pinnedMemoryAvailable()) {
      sayPinnedFallbackOnce();
      pinned = false;
    }
    pool_class->tensor_options = at::TensorOptions()
                                     .dtype(pool_class->options.dtype)
                                     .device(pool_class->options.device)
                                     .pinned_memory(pinned);
    std::size_t item_bytes = c10::elementSize(pool_class->options.dtype);
    std::lock_guard<std::mutex> lock(pool_class->mutex);
    for (std::size_t i = 0; i < pool_class->grid.count(); ++i) {
      auto bucket = std::make_unique<PoolBucket>();
      bucket->owner = pool_class.get();
      bucket->shape = pool_class->grid.shape(i);
      bucket->buffer_bytes = static_cast<std::size_t>(pool_class->grid.elements(i)) * item_bytes;
      std::string shape = common::shapeText(bucket->shape.data(), bucket->shape.size());
      bucket->lease_name = track::poolLeaseName(
          (std::string(track::kPoolLeaseOpPrefix) + " '" + pool_class->options.name + "' " + shape)
              .c_str());
      bucket->stats.class_name = pool_class->options.name;
      bucket->stats.shape = bucket->shape;
      bucket->stats.pinned = pinned;
      for (std::size_t n = 0; n < pool_class->options.capacity; ++n) {
        bucket->free.push_back(&addSlot(*bucket));
      }
      pool_class->buckets.push_back(std::move(bucket));
    }
    core_->classes.push_back(std::move(pool_class));
  }
}

TensorPool::~TensorPool() {
  std::ostringstream out;
  std::size_t leases_out = 0;
  for (const auto& pool_class : core_->classes) {
    std::lock_guard<std::mutex> lock(pool_class->mutex);
    for (const auto& bucket : pool_class->buckets) {
      if (bucket->stats.leases_out == 0) continue;
      leases_out += bucket->stats.leases_out;
      out << "\n  class '" << pool_class->options.name << "' bucket "
          << common::shapeText(bucket->shape.data(), bucket->shape.size()) << ": "
          << bucket->stats.leases_out << " out";
    }
  }
  if (leases_out == 0) return;
  std::cerr << "memseal: TensorPool destroyed with " << leases_out
            << " lease(s) still out; their buffers stay valid until they are released:" << out.str()
            << "\n";
}

TensorLease TensorPool::tryAcquire(std::string_view class_name, at::IntArrayRef shape) {
  return acquireWith(class_name, shape, /*may_block_or_grow=*/false);
}

TensorLease TensorPool::acquire(std::string_view class_name, at::IntArrayRef shape) {
  return acquireWith(class_name, shape, /*may_block_or_grow=*/true);
}

TensorLease TensorPool::acquireWith(std::string_view class_name, at::IntArrayRef shape,
                                    bool may_block_or_grow) {
  // Held for the whole call: a thread waiting here keeps the classes alive even if the pool is
  // destroyed meanwhile (it then waits out its timeout).
  std::shared_ptr<PoolCore> core = core_;
  PoolClass& pool_class = classNamed(*core, class_name);
  checkRequest(pool_class, shape);
  TensorLease lease;
  std::size_t smallest = pool_class.grid.smallestFitting(shape.data());
  if (smallest == pool::BucketGrid::kNone) {
    if (!may_block_or_grow) return lease;
    if (pool_class.options.on_exhausted != PoolExhaustion::kGrow) {
      std::vector<std::int64_t> largest = pool_class.grid.largest();
      throw PoolExhaustedError("memseal: TensorPool class " + classLabel(pool_class) +
                               ": the request " + common::shapeText(shape.data(), shape.size()) +
                               " is larger than every bucket (the largest is " +
                               common::shapeText(largest.data(), largest.size()) +
                               "); add larger sizes or use PoolExhaustion::kGrow");
    }
    // A buffer of its own, freed with the lease: counted, so an undersized pool shows in stats.
    core->oversize_acquisitions.fetch_add(1, std::memory_order_relaxed);
    c10::InferenceMode normal_tensors(/*enabled=*/false);
    lease.view_ = at::empty(shape, pool_class.tensor_options);
    lease.oversize_ = true;
    lease.core_ = core;
    return lease;
  }
  PoolSlot* slot = nullptr;
  {
    std::unique_lock<std::mutex> lock(pool_class.mutex);
    slot = takeFitting(pool_class, smallest, shape.data());
    if (slot == nullptr && may_block_or_grow) {
      slot = slotWhenExhausted(pool_class, smallest, shape, lock);
    }
    if (slot == nullptr) return lease;
    PoolBucket& bucket = *slot->bucket;
    slot->leased = true;
    ++bucket.stats.acquisitions;
    ++bucket.stats.leases_out;
    bucket.stats.leases_high_water =
        std::max(bucket.stats.leases_high_water, bucket.stats.leases_out);
  }
  // The lease owns the slot before anything below may throw: its destructor gives it back.
  lease.slot_ = slot;
  lease.core_ = core;
  lease.view_ = viewOf(slot->buffer, shape);
  slot->recorded = track::beginLease(lease.view_, slot->bucket->lease_name);
  return lease;
}

PoolStats TensorPool::stats() const {
  PoolStats stats;
  for (const auto& pool_class : core_->classes) {
    std::lock_guard<std::mutex> lock(pool_class->mutex);
    for (const auto& bucket : pool_class->buckets) {
      stats.buckets.push_back(bucket->stats);
      stats.bytes_held += bucket->stats.bytes_held;
    }
  }
  stats.oversize_acquisitions = core_->oversize_acquisitions.load(std::memory_order_relaxed);
  return stats;
}

std::string PoolStats::toText() const {
  std::ostringstream out;
  out << "TensorPool: " << common::bytesText(static_cast<std::int64_t>(bytes_held))
      << " in buffers";
  if (oversize_acquisitions > 0) {
    out << ", " << oversize_acquisitions << " oversize request(s) served by their own buffer";
  }
  out << "\n";
  for (const PoolBucketStats& bucket : buckets) {
    if (bucket.acquisitions == 0 && bucket.grows == 0 && bucket.failures == 0) continue;
    out << "  " << bucket.class_name << " "
        << common::shapeText(bucket.shape.data(), bucket.shape.size()) << ": "
        << bucket.acquisitions << " acquired, " << bucket.leases_out << " out (high water "
        << bucket.leases_high_water << " of " << bucket.buffers << " buffers";
    if (bucket.grows > 0) out << ", " << bucket.grows << " grown";
    out << "), " << bucket.waits << " waits";
    if (bucket.waits > 0) {
      out << " (" << bucket.wait_ns / 1000000 << " ms, longest " << bucket.max_wait_ns / 1000000
          << " ms)";
    }
    out << ", " << bucket.failures << " failures";
    if (bucket.held_after_release > 0) {
      out << ", " << bucket.held_after_release << " released while still referenced";
    }
    if (bucket.pinned) out << ", pinned";
    out << "\n";
  }
  return out.str();
}

}  // namespace memseal
