#include "explain/cuda_allocator_model.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace memseal::explain {

namespace {

using namespace cuda_sizes;

// More memory than any device has (4 PiB): the most the model lets a device hold, so that its
// addresses and sums never overflow.
constexpr std::uint64_t kMostDevice = std::uint64_t{1} << 52;
// A request larger than this (1 PiB) runs out of memory on any device.
constexpr std::uint64_t kMostRequest = std::uint64_t{1} << 50;
// Model addresses: segments lie this far apart, so no two are ever neighbours.
constexpr std::uint64_t kSegmentGap = 2 << 20;

}  // namespace

CudaAllocatorModel::CudaAllocatorModel(CudaAllocatorSettings settings, std::uint64_t device_bytes)
    : settings_(std::move(settings)), device_bytes_(std::min(device_bytes, kMostDevice)) {}

std::uint64_t CudaAllocatorModel::allowedBytes() const {
  if (!settings_.memory_fraction) return device_bytes_;
  return static_cast<std::uint64_t>(*settings_.memory_fraction *
                                    static_cast<double>(device_bytes_));
}

bool CudaAllocatorModel::gcOn() const {
  return settings_.memory_fraction && settings_.garbage_collection_threshold > 0;
}

bool CudaAllocatorModel::allocate(std::uint64_t id, std::uint64_t bytes, std::int64_t stream) {
  if (bytes > kMostRequest) return false;  // beyond any device: the sums stay far from overflow
  if (live_.count(id) != 0) free(id);      // a trace that lost this address's free
  std::uint64_t rounded = roundedBlockSize(bytes, settings_);
  Pool which = rounded <= kSmallSize ? Pool::kSmall : Pool::kLarge;
  if (gcOn()) ++pool(which).searches;
  std::optional<std::uint64_t> address = cachedBlock(which, stream, rounded);
  if (!address) {
    if (gcOn()) collectGarbage();
    std::uint64_t bytes_of_segment = segmentSize(rounded);
    auto take = [&] {
      return settings_.expandable_segments ? expandSegment(which, stream, rounded, bytes_of_segment)
                                           : newSegment(which, stream, bytes_of_segment);
    };
    address = take();
    if (!address && releaseOversizeBlocks(which, stream, rounded)) address = take();
    if (!address && releaseCachedBlocks()) address = take();
    if (!address) return false;
  }
  Block& block = blocks_.at(*address);
  std::uint64_t remaining = block.size - rounded;
  bool split = which == Pool::kSmall || settings_.expandable_segments
                   ? remaining >= kMinBlockSize
                   : (!settings_.max_split_size || rounded < *settings_.max_split_size) &&
                         remaining > kSmallSize;
  if (split) {
    Block rest = block;
    rest.size = remaining;
    block.size = rounded;
    blocks_.emplace(*address + rounded, rest);
    cache(*address + rounded);
  }
  block.allocated = true;
  allocated_ += block.size;
  live_[id] = *address;
  return true;
}

std::optional<std::uint64_t> CudaAllocatorModel::cachedBlock(Pool which, std::int64_t stream,
                                                             std::uint64_t rounded) {
  FreeBlocks& cached = pool(which);
  auto it = cached.blocks.lower_bound({stream, rounded, 0});
  if (it == cached.blocks.end() || std::get<0>(*it) != stream) return std::nullopt;
  if (settings_.expandable_segments) {
    // A block before unmapped space is as large as both: a smaller one after it is taken first.
    for (auto next = std::next(it);
         next != cached.blocks.end() && std::get<0>(*next) == stream &&
         withUnmappedAfter(std::get<2>(*next)) < withUnmappedAfter(std::get<2>(*it));
         ++next) {
      it = next;
    }
  }
  std::uint64_t size = std::get<1>(*it);
  if (settings_.max_split_size) {
    std::uint64_t max_split = *settings_.max_split_size;
    // An oversize block is not given to a small request, nor to a large one it exceeds by much.
    if (rounded < max_split && size >= max_split) return std::nullopt;
    if (rounded >= max_split && size >= rounded + settings_.max_non_split_rounding) {
      return std::nullopt;
    }
  }
  std::uint64_t address = std::get<2>(*it);
  cached.blocks.erase(it);
  return address;
}

std::optional<std::uint64_t> CudaAllocatorModel::newSegment(Pool which, std::int64_t stream,
                                                            std::uint64_t bytes) {
  if (reserved_ + bytes > allowedBytes()) return std::nullopt;
  std::uint64_t address = next_segment_address_;
  next_segment_address_ += bytes + kSegmentGap;
  addSegment(address, bytes, /*expandable=*/false, /*page=*/0, which, stream);
  reserved_ += bytes;
  return address;
}

void CudaAllocatorModel::addSegment(std::uint64_t address, std::uint64_t bytes, bool expandable,
                                    std::uint64_t page, Pool which, std::int64_t stream) {
  segments_[address] = Segment{bytes, expandable, page};
  Block block;
  block.size = bytes;
  block.segment = address;
  block.stream = stream;
  block.pool = which;
  block.mapped = !expandable;  // an expandable segment's pages are mapped as blocks need them
  blocks_.emplace(address, block);
}

bool CudaAllocatorModel::releaseOversizeBlocks(Pool which, std::int64_t stream,
                                               std::uint64_t rounded) {
  if (!settings_.max_split_size) return false;
  std::uint64_t max_split = *settings_.max_split_size;
  FreeBlocks& cached = pool(which);
  std::uint64_t wanted = std::max(rounded, max_split);
  auto it = cached.blocks.lower_bound({stream, wanted, 0});
  if (it != cached.blocks.end() && std::get<0>(*it) == stream) {
    if (!wholeSegment(std::get<2>(*it))) return false;
    releaseSegment(std::get<2>(*it));
    return true;
  }
  // No one block is large enough: the stream's oversize blocks, the largest first.
  if (it == cached.blocks.begin()) return false;
  std::uint64_t released = 0;
  --it;
  while (released < wanted && std::get<1>(*it) >= max_split && std::get<0>(*it) == stream) {
    auto current = it;
    bool first = current == cached.blocks.begin();
    if (!first) --it;
    std::uint64_t address = std::get<2>(*current), size = std::get<1>(*current);
    if (wholeSegment(address)) {
      releaseSegment(address);
      released += size;
    }
    if (first) break;
  }
  return released >= wanted;
}

bool CudaAllocatorModel::releaseCachedBlocks() {
  ++cache_flushes_;
  emptyCache();
  return true;
}

void CudaAllocatorModel::emptyCache() {
  for (FreeBlocks* cached : {&small_, &large_}) {
    std::vector<std::uint64_t> addresses;
    for (const FreeKey& key : cached->blocks) addresses.push_back(std::get<2>(key));
    for (std::uint64_t address : addresses) {
      if (expandable(address)) {
        unmapPages(address);
      } else if (wholeSegment(address)) {
        releaseSegment(address);
      }
    }
  }
}

void CudaAllocatorModel::collectGarbage() {
  auto threshold = static_cast<std::uint64_t>(settings_.garbage_collection_threshold *
                                              static_cast<double>(allowedBytes()));
  if (reserved_ <= threshold) return;
  std::uint64_t target = reserved_ - threshold;
  auto age = [&](std::uint64_t address) {
    return large_.searches - blocks_.at(address).freed_at_search;
  };
  std::uint64_t total_age = 0;
  std::size_t freeable = 0;
  for (const FreeKey& key : large_.blocks) {
    if (!wholeSegment(std::get<2>(key))) continue;
    total_age += age(std::get<2>(key));
    ++freeable;
  }
  std::uint64_t reclaimed = 0;
  bool freed = true;
  // The blocks at least as old as the average first, again and again until enough is freed.
  while (reclaimed < target && freed && freeable > 0) {
    double average_age = static_cast<double>(total_age) / static_cast<double>(freeable);
    freed = false;
    std::vector<FreeKey> keys(large_.blocks.begin(), large_.blocks.end());
    for (const FreeKey& key : keys) {
      std::uint64_t address = std::get<2>(key);
      if (!wholeSegment(address) || static_cast<double>(age(address)) < average_age) continue;
      freed = true;
      reclaimed += std::get<1>(key);
      total_age -= age(address);
      --freeable;
      releaseSegment(address);
    }
  }
}

void CudaAllocatorModel::free(std::uint64_t id) {
  auto live = live_.find(id);
  if (live == live_.end()) return;
  std::uint64_t address = live->second;
  live_.erase(live);
  auto it = blocks_.find(address);
  Block& block = it->second;
  block.allocated = false;
  allocated_ -= block.size;
  // Merged with its free neighbours in its segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.segment == block.segment && !next->second.allocated &&
      next->second.mapped) {
    uncache(next->first);
    block.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto previous = std::prev(it);
    if (previous->second.segment == block.segment && !previous->second.allocated &&
        previous->second.mapped) {
      uncache(previous->first);
      previous->second.size += block.size;
      blocks_.erase(it);
      address = previous->first;
    }
  }
  cache(address);
}

void CudaAllocatorModel::cache(std::uint64_t address) {
  Block& block = blocks_.at(address);
  FreeBlocks& cached = pool(block.pool);
  block.freed_at_search = cached.searches;
  cached.blocks.insert({block.stream, block.size, address});
}

void CudaAllocatorModel::uncache(std::uint64_t address) {
  const Block& block = blocks_.at(address);
  pool(block.pool).blocks.erase({block.stream, block.size, address});
}

bool CudaAllocatorModel::wholeSegment(std::uint64_t address) const {
  auto block = blocks_.find(address);
  auto segment = segments_.find(address);
  return block != blocks_.end() && segment != segments_.end() && !segment->second.expandable &&
         block->second.size == segment->second.size;
}

void CudaAllocatorModel::releaseSegment(std::uint64_t address) {
  uncache(address);
  reserved_ -= segments_.at(address).size;
  segments_.erase(address);
  blocks_.erase(address);
}

CudaAllocatorState CudaAllocatorModel::state() const {
  CudaAllocatorState now;
  now.reserved = reserved_;
  now.allocated = allocated_;
  now.segments = segments_.size();
  for (const FreeBlocks* cached : {&small_, &large_}) {
    for (const FreeKey& key : cached->blocks) {
      now.largest_free_block = std::max(now.largest_free_block, std::get<1>(key));
    }
  }
  return now;
}

CudaAllocatorReplay replayCudaAllocator(const std::vector<CudaAllocatorEvent>& events,
                                        const CudaAllocatorSettings& settings,
                                        std::uint64_t device_bytes) {
  CudaAllocatorModel model(settings, device_bytes);
  CudaAllocatorReplay replay;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const CudaAllocatorEvent& event = events[i];
    if (event.kind == CudaAllocatorEvent::Kind::kFree) {
      model.free(event.id);
      continue;
    }
    if (event.kind == CudaAllocatorEvent::Kind::kEmptyCache) {
      model.emptyCache();
      continue;
    }
    if (!model.allocate(event.id, event.bytes, event.stream)) {
      replay.out_of_memory_at = i;
      replay.at_out_of_memory = model.state();
      break;
    }
    replay.allocated_peak = std::max(replay.allocated_peak, model.allocated());
    if (model.reserved() > replay.reserved_peak) {
      replay.reserved_peak = model.reserved();
      replay.at_reserved_peak = model.state();
    }
  }
  replay.at_end = model.state();
  replay.cache_flushes = model.cacheFlushes();
  return replay;
}

}  // namespace memseal::explain
