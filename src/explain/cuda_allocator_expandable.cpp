// expandable_segments:True in the model of the caching allocator (cuda_allocator_model.h): one
// segment per stream and pool reserves address space for the whole device and maps memory into it
// page by page (2 MiB pages for the small pool, 20 MiB for the large) as blocks need it; reserved
// memory is what is mapped. Memory is unmapped only by empty_cache (or before an out-of-memory
// error), and only whole pages inside free blocks. Blocks split wherever 512 bytes remain.
#include <algorithm>
#include <iterator>

#include "explain/cuda_allocator_model.h"

namespace memseal::explain {

namespace {

using namespace cuda_sizes;

// Model addresses of expandable segments lie apart from ordinary ones and from each other.
constexpr std::uint64_t kExpandableBase = std::uint64_t{1} << 62;

std::uint64_t pageOf(bool small) { return small ? kSmallBuffer : kLargeBuffer; }

}  // namespace

bool CudaAllocatorModel::expandable(std::uint64_t address) const {
  auto block = blocks_.find(address);
  return block != blocks_.end() && segments_.at(block->second.segment).expandable;
}

std::uint64_t CudaAllocatorModel::withUnmappedAfter(std::uint64_t address) const {
  auto it = blocks_.find(address);
  std::uint64_t size = it->second.size;
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.segment == it->second.segment && !next->second.mapped) {
    size += next->second.size;
  }
  return size;
}

std::optional<std::uint64_t> CudaAllocatorModel::expandSegment(Pool which, std::int64_t stream,
                                                               std::uint64_t rounded,
                                                               std::uint64_t bytes_of_segment) {
  // The memory fraction is checked against the segment an ordinary block would take.
  if (settings_.memory_fraction && reserved_ + bytes_of_segment > allowedBytes()) {
    return std::nullopt;
  }
  const int pool_index = static_cast<int>(which);
  std::optional<std::uint64_t> unmapped;
  std::uint64_t free_before = 0;  // of a free mapped block just before it
  for (auto it = unmapped_.lower_bound({stream, pool_index, 0});
       it != unmapped_.end() && std::get<0>(*it) == stream && std::get<1>(*it) == pool_index;
       ++it) {
    auto block = blocks_.find(std::get<2>(*it));
    std::uint64_t before = 0;
    if (block != blocks_.begin()) {
      const Block& previous = std::prev(block)->second;
      if (previous.segment == block->second.segment && previous.mapped && !previous.allocated) {
        before = previous.size;
      }
    }
    if (before + block->second.size >= rounded) {
      unmapped = block->first;
      free_before = before;
      break;
    }
  }
  std::uint64_t page = pageOf(which == Pool::kSmall);
  if (!unmapped) {
    // A new segment's address space: the device's memory and an eighth more, as the allocator
    // reserves it.
    std::uint64_t space = page * ((device_bytes_ + device_bytes_ / 8 + page - 1) / page);
    if (space < rounded) return std::nullopt;
    std::uint64_t address = kExpandableBase + next_expandable_address_;
    next_expandable_address_ += space + page;
    addSegment(address, space, /*expandable=*/true, page, which, stream);
    unmapped_.insert({stream, pool_index, address});
    unmapped = address;
  }
  std::uint64_t needed = rounded - free_before;
  std::uint64_t to_map = std::min(page * ((needed + page - 1) / page), blocks_.at(*unmapped).size);
  if (reserved_ + to_map > device_bytes_) {
    joinUnmapped(*unmapped);  // a segment just made and never mapped goes again
    return std::nullopt;
  }
  return mapAt(*unmapped, to_map);
}

std::uint64_t CudaAllocatorModel::mapAt(std::uint64_t address, std::uint64_t bytes) {
  Block& space = blocks_.at(address);
  unmapped_.erase({space.stream, static_cast<int>(space.pool), address});
  if (space.size > bytes) {
    Block rest = space;
    rest.size = space.size - bytes;
    blocks_.emplace(address + bytes, rest);
    unmapped_.insert({rest.stream, static_cast<int>(rest.pool), address + bytes});
  }
  space.size = bytes;
  space.mapped = true;
  reserved_ += bytes;
  // Merged with free mapped neighbours (the free block before it, a hole's far side).
  auto it = blocks_.find(address);
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.segment == space.segment && next->second.mapped &&
      !next->second.allocated) {
    uncache(next->first);
    space.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto previous = std::prev(it);
    if (previous->second.segment == space.segment && previous->second.mapped &&
        !previous->second.allocated) {
      uncache(previous->first);
      previous->second.size += space.size;
      blocks_.erase(it);
      return previous->first;
    }
  }
  return address;
}

void CudaAllocatorModel::unmapPages(std::uint64_t address) {
  Block block = blocks_.at(address);
  const Segment& segment = segments_.at(block.segment);
  std::uint64_t offset = address - block.segment;
  std::uint64_t begin = block.segment + segment.page * ((offset + segment.page - 1) / segment.page);
  std::uint64_t end = block.segment + segment.page * ((offset + block.size) / segment.page);
  if (begin >= end) return;  // no whole page inside
  uncache(address);
  blocks_.erase(address);
  auto keep = [&](std::uint64_t from, std::uint64_t to) {
    if (from >= to) return;
    Block piece = block;
    piece.size = to - from;
    blocks_.emplace(from, piece);
    cache(from);
  };
  keep(address, begin);
  keep(end, address + block.size);
  Block unmapped = block;
  unmapped.size = end - begin;
  unmapped.mapped = false;
  blocks_.emplace(begin, unmapped);
  unmapped_.insert({block.stream, static_cast<int>(block.pool), begin});
  reserved_ -= end - begin;
  joinUnmapped(begin);
}

void CudaAllocatorModel::joinUnmapped(std::uint64_t address) {
  auto it = blocks_.find(address);
  auto unmappedNeighbour = [&](std::map<std::uint64_t, Block>::iterator other) {
    return other->second.segment == it->second.segment && !other->second.mapped;
  };
  auto forget = [&](std::map<std::uint64_t, Block>::iterator other) {
    unmapped_.erase({other->second.stream, static_cast<int>(other->second.pool), other->first});
  };
  auto next = std::next(it);
  if (next != blocks_.end() && unmappedNeighbour(next)) {
    forget(next);
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin() && unmappedNeighbour(std::prev(it))) {
    auto previous = std::prev(it);
    forget(it);
    previous->second.size += it->second.size;
    blocks_.erase(it);
    it = previous;
  }
  std::uint64_t segment = it->second.segment;
  if (it->first == segment && it->second.size == segments_.at(segment).size) {
    // Nothing mapped is left: the address space goes back too.
    forget(it);
    blocks_.erase(it);
    segments_.erase(segment);
  }
}

}  // namespace memseal::explain
