// One pass over the live table under its shard locks; steps are collected per group and sorted
// once at the end, so a census costs O(n log n) in the survivors however they are spread.
#include "analyze/survivors.h"

#include <algorithm>
#include <tuple>

#include "analyze/live_view.h"
#include "track/hashing.h"

namespace memseal::analyze {

bool SurvivorKey::operator<(const SurvivorKey& other) const {
  return std::tie(site, scalar_type, requires_grad, is_leaf, grad_fn_name, cuda_device) <
         std::tie(other.site, other.scalar_type, other.requires_grad, other.is_leaf,
                  other.grad_fn_name, other.cuda_device);
}

std::size_t SurvivorKeyHash::operator()(const SurvivorKey& key) const {
  std::uint64_t flags =
      (static_cast<std::uint64_t>(static_cast<std::uint8_t>(key.cuda_device)) << 10) |
      (static_cast<std::uint64_t>(static_cast<std::uint8_t>(key.scalar_type)) << 2) |
      (key.requires_grad ? 2 : 0) | (key.is_leaf ? 1 : 0);
  return static_cast<std::size_t>(
      track::combineHash(track::combineHash(key.site, key.grad_fn_name), flags));
}

SurvivorKey survivorKeyOf(const track::LiveRecord& record) {
  SurvivorKey key;
  key.site = record.site;
  key.scalar_type = record.signature.scalar_type;
  key.requires_grad = record.signature.requires_grad;
  key.is_leaf = record.signature.is_leaf;
  key.grad_fn_name = record.signature.grad_fn_name;
  key.cuda_device = record.cuda_device;
  return key;
}

void ShapeSummary::add(const track::TensorSignature& signature) {
  if (signature.dims < 0 || dims == -2) return;
  int rank = std::min<int>(signature.dims, track::kMaxCachedDims);
  if (dims == -1) {
    dims = static_cast<std::int8_t>(rank);
    std::copy(signature.sizes, signature.sizes + rank, min);
    std::copy(signature.sizes, signature.sizes + rank, max);
  } else if (dims != rank) {
    dims = -2;
    return;
  }
  std::uint64_t hash = 0x51ed27;
  for (int i = 0; i < rank; ++i) {
    min[i] = std::min(min[i], signature.sizes[i]);
    max[i] = std::max(max[i], signature.sizes[i]);
    hash = track::combineHash(hash, static_cast<std::uint64_t>(signature.sizes[i]));
  }
  if (distinct.size() < kMaxDistinct &&
      std::find(distinct.begin(), distinct.end(), hash) == distinct.end()) {
    distinct.push_back(hash);
  }
}

void ShapeSummary::merge(const ShapeSummary& other) {
  if (other.dims == -1 || dims == -2) return;
  if (dims == -1) {
    *this = other;
    return;
  }
  if (other.dims != dims) {
    dims = -2;
    return;
  }
  for (int i = 0; i < dims; ++i) {
    min[i] = std::min(min[i], other.min[i]);
    max[i] = std::max(max[i], other.max[i]);
  }
  for (std::uint64_t hash : other.distinct) {
    if (distinct.size() >= kMaxDistinct) break;
    if (std::find(distinct.begin(), distinct.end(), hash) == distinct.end()) {
      distinct.push_back(hash);
    }
  }
}

std::vector<std::int64_t> ShapeSummary::minShape() const {
  return dims >= 0 ? std::vector<std::int64_t>(min, min + dims) : std::vector<std::int64_t>{};
}

std::vector<std::int64_t> ShapeSummary::maxShape() const {
  return dims >= 0 ? std::vector<std::int64_t>(max, max + dims) : std::vector<std::int64_t>{};
}

SurvivorCensus takeSurvivorCensus(std::uint32_t first_step, std::uint32_t last_step) {
  SurvivorCensus census;
  forEachLiveRecord(
      [&](const track::LiveRecord& record) {
        if (record.step < first_step || record.step > last_step) return;
        SurvivorGroup& group = census.groups[survivorKeyOf(record)];
        if (group.steps.empty() || group.steps.back() != record.step) {
          group.steps.push_back(record.step);
        }
        group.count += 1;
        group.bytes += static_cast<std::int64_t>(record.bytes);
        group.shapes.add(record.signature);
      },
      LiveSet::kHeld);
  for (auto& [key, group] : census.groups) {
    std::sort(group.steps.begin(), group.steps.end());
    group.steps.erase(std::unique(group.steps.begin(), group.steps.end()), group.steps.end());
  }
  return census;
}

}  // namespace memseal::analyze
