#include "pool/bucket_grid.h"

#include <algorithm>
#include <stdexcept>

namespace memseal::pool {

BucketGrid::BucketGrid(std::vector<std::vector<std::int64_t>> sizes) : sizes_(std::move(sizes)) {
  if (sizes_.empty()) throw std::invalid_argument("sizes has no dimension");
  count_ = 1;
  for (std::size_t dim = 0; dim < sizes_.size(); ++dim) {
    const std::vector<std::int64_t>& options = sizes_[dim];
    std::string where = "sizes of dimension " + std::to_string(dim);
    if (options.empty()) throw std::invalid_argument(where + " are empty");
    for (std::size_t i = 0; i < options.size(); ++i) {
      if (options[i] <= 0) {
        throw std::invalid_argument(where + " must be positive (got " + std::to_string(options[i]) +
                                    ")");
      }
      if (i > 0 && options[i] <= options[i - 1]) {
        throw std::invalid_argument(where + " must be strictly ascending (" +
                                    std::to_string(options[i - 1]) + " then " +
                                    std::to_string(options[i]) + ")");
      }
    }
    count_ *= options.size();
    if (count_ > kMaxBuckets) {
      throw std::invalid_argument("sizes make more than " + std::to_string(kMaxBuckets) +
                                  " buckets");
    }
  }
  strides_.assign(sizes_.size(), 1);
  for (std::size_t dim = sizes_.size() - 1; dim > 0; --dim) {
    strides_[dim - 1] = strides_[dim] * sizes_[dim].size();
  }
}

std::size_t BucketGrid::sizeIndex(std::size_t index, std::size_t dim) const {
  return (index / strides_[dim]) % sizes_[dim].size();
}

std::vector<std::int64_t> BucketGrid::shape(std::size_t index) const {
  std::vector<std::int64_t> result(sizes_.size());
  for (std::size_t dim = 0; dim < sizes_.size(); ++dim) {
    result[dim] = sizes_[dim][sizeIndex(index, dim)];
  }
  return result;
}

std::int64_t BucketGrid::elements(std::size_t index) const {
  std::int64_t product = 1;
  for (std::size_t dim = 0; dim < sizes_.size(); ++dim)
    product *= sizes_[dim][sizeIndex(index, dim)];
  return product;
}

std::size_t BucketGrid::smallestFitting(const std::int64_t* request) const {
  std::size_t index = 0;
  for (std::size_t dim = 0; dim < sizes_.size(); ++dim) {
    const std::vector<std::int64_t>& options = sizes_[dim];
    auto found = std::lower_bound(options.begin(), options.end(), request[dim]);
    if (found == options.end()) return kNone;
    index += static_cast<std::size_t>(found - options.begin()) * strides_[dim];
  }
  return index;
}

bool BucketGrid::fits(std::size_t index, const std::int64_t* request) const {
  for (std::size_t dim = 0; dim < sizes_.size(); ++dim) {
    if (sizes_[dim][sizeIndex(index, dim)] < request[dim]) return false;
  }
  return true;
}

std::vector<std::int64_t> BucketGrid::largest() const { return shape(count_ - 1); }

}  // namespace memseal::pool
