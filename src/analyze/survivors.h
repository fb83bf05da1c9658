// The census of survivors: live allocations of the current session made in a range of steps,
// grouped by where and what they are (site, dtype, autograd state), with their shapes as a detail.
// The leak detector takes one at every step boundary; a census takes no tensor reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "track/live_record.h"

namespace memseal::analyze {

// Shape is deliberately not part of the key: a cache keyed by input size retains tensors of a new
// shape every step, and they are one leak.
struct SurvivorKey {
  std::uint32_t site = 0;
  std::int8_t scalar_type = -1;
  bool requires_grad = false;
  bool is_leaf = true;
  std::uint32_t grad_fn_name = 0;
  std::int8_t cuda_device = -1;  // -1: CPU memory; a CUDA tensor's device otherwise
  bool operator==(const SurvivorKey& other) const {
    return site == other.site && scalar_type == other.scalar_type &&
           requires_grad == other.requires_grad && is_leaf == other.is_leaf &&
           grad_fn_name == other.grad_fn_name && cuda_device == other.cuda_device;
  }
  bool operator<(const SurvivorKey& other) const;
};
struct SurvivorKeyHash {
  std::size_t operator()(const SurvivorKey& key) const;
};
SurvivorKey survivorKeyOf(const track::LiveRecord& record);

// The shapes seen in a group: per dimension the smallest and largest size, and how many distinct
// shapes (counted up to kMaxDistinct).
struct ShapeSummary {
  static constexpr std::size_t kMaxDistinct = 64;
  std::int8_t dims = -1;  // -1: none seen; -2: tensors of different ranks
  std::int64_t min[track::kMaxCachedDims] = {};
  std::int64_t max[track::kMaxCachedDims] = {};
  std::vector<std::uint64_t> distinct;  // hashes of the distinct shapes
  void add(const track::TensorSignature& signature);
  void merge(const ShapeSummary& other);
  std::vector<std::int64_t> minShape() const;
  std::vector<std::int64_t> maxShape() const;
};

struct SurvivorGroup {
  std::vector<std::uint32_t> steps;  // distinct steps with survivors, sorted
  std::int64_t count = 0;
  std::int64_t bytes = 0;
  ShapeSummary shapes;
};

struct SurvivorCensus {
  std::unordered_map<SurvivorKey, SurvivorGroup, SurvivorKeyHash> groups;
};

// Survivors made in steps [first_step, last_step] of the current session.
SurvivorCensus takeSurvivorCensus(std::uint32_t first_step, std::uint32_t last_step);

}  // namespace memseal::analyze
