// The buckets of a pool class: one buffer shape per combination of the per-dimension sizes, and the
// choice of bucket for a request. Pure (no libtorch, no globals), so the choice is tested alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memseal::pool {

class BucketGrid {
 public:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  // Refuses (std::invalid_argument, saying what) no dimension, a dimension with no size, sizes not
  // positive or not strictly ascending, and grids of more than kMaxBuckets buckets.
  static constexpr std::size_t kMaxBuckets = 4096;
  explicit BucketGrid(std::vector<std::vector<std::int64_t>> sizes);

  std::size_t rank() const { return sizes_.size(); }
  std::size_t count() const { return count_; }
  // The bucket's shape; index in [0, count()), the first dimension varying slowest.
  std::vector<std::int64_t> shape(std::size_t index) const;
  std::int64_t elements(std::size_t index) const;
  // The smallest bucket whose every dimension holds the request's, or kNone when some dimension is
  // larger than its largest size. `request` has rank() entries.
  std::size_t smallestFitting(const std::int64_t* request) const;
  bool fits(std::size_t index, const std::int64_t* request) const;
  // The largest bucket's shape, for messages.
  std::vector<std::int64_t> largest() const;

 private:
  std::size_t sizeIndex(std::size_t index, std::size_t dim) const;

  std::vector<std::vector<std::int64_t>> sizes_;
  std::vector<std::size_t> strides_;  // mixed radix: index = sum(size index[d] * strides_[d])
  std::size_t count_ = 0;
};

}  // namespace memseal::pool
