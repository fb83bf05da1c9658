// Replays the CUDA caching allocator's events into live segments and blocks per device.
//
// Invariants the ledger keeps after every event, whatever the input:
//  - segments never overlap, blocks never overlap (a new one on top of a stale one evicts it);
//  - allocated == sum of the bytes of blocks not free-requested, pending_free_bytes == the rest,
//    reserved == sum of segment bytes: totals change only together with the maps, so none can
//    go negative;
//  - an event that cannot be matched changes at most what it can prove, and counts once in
//    unmatched_events.
#include "track/device_ledger.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <utility>

#include "common/bounded_samples.h"
#include "common/text.h"

namespace memseal::track {

namespace {

using common::minusOrZero;

constexpr std::uint64_t kMaxAddress = std::numeric_limits<std::uint64_t>::max();

// The end of [begin, begin + bytes), or nothing for an empty or wrapping range.
std::optional<std::uint64_t> rangeEnd(std::uint64_t begin, std::uint64_t bytes) {
  if (bytes == 0 || begin > kMaxAddress - bytes) return std::nullopt;
  return begin + bytes;
}

// Never below zero, even if a caller's numbers disagree.

void raisePeak(std::uint64_t& peak, std::uint64_t value) { peak = std::max(peak, value); }

// The first entry of `entries` (segments or blocks by start address, never overlapping) that ends
// after `begin`: the one reaching into it from below, else the first starting at or after it.
template <typename Entries>
auto firstReaching(Entries& entries, std::uint64_t begin) {
  auto entry = entries.lower_bound(begin);
  if (entry != entries.begin() &&
      std::prev(entry)->first + std::prev(entry)->second.bytes > begin) {
    --entry;
  }
  return entry;
}

// Whether any entry lies in [begin, end).
template <typename Entries>
bool overlapsAny(const Entries& entries, std::uint64_t begin, std::uint64_t end) {
  auto entry = firstReaching(entries, begin);
  return entry != entries.end() && entry->first < end;
}

}  // namespace

DeviceMemoryLedger::Device& DeviceMemoryLedger::device(int index) { return devices_[index]; }

const DeviceMemoryLedger::Device* DeviceMemoryLedger::findDevice(int index) const {
  auto found = devices_.find(index);
  return found == devices_.end() ? nullptr : &found->second;
}

void DeviceMemoryLedger::apply(const DeviceMemoryEvent& event) {
  Device& state = device(event.device);
  switch (event.kind) {
    case DeviceEventKind::kSegmentAlloc:
      addSegment(state, event, /*expandable=*/false);
      break;
    case DeviceEventKind::kSegmentMap:
      addSegment(state, event, /*expandable=*/true);
      break;
    case DeviceEventKind::kSegmentFree: {
      // A segment is freed whole, by its start address; its recorded size is the truth.
      auto found = state.segments.find(event.address);
      if (found == state.segments.end()) {
        ++state.totals.unmatched_events;
        break;
      }
      bool unmatched = false;
      removeSegmentRange(state, found->first, found->first + found->second.bytes, unmatched);
      if (unmatched) ++state.totals.unmatched_events;
      break;
    }
    case DeviceEventKind::kSegmentUnmap: {
      std::optional<std::uint64_t> end = rangeEnd(event.address, event.bytes);
      bool unmatched = !end.has_value();
      if (end) removeSegmentRange(state, event.address, *end, unmatched);
      if (unmatched) ++state.totals.unmatched_events;
      break;
    }
    case DeviceEventKind::kBlockAlloc:
      allocateBlock(state, event);
      break;
    case DeviceEventKind::kBlockFreeRequested:
    case DeviceEventKind::kBlockFreeCompleted:
      freeBlock(state, event);
      break;
    case DeviceEventKind::kOutOfMemory:
      recordOom(state, event);
      break;
  }
}

void DeviceMemoryLedger::seed(const DeviceSegmentSeed& segment) {
  std::optional<std::uint64_t> end = rangeEnd(segment.address, segment.bytes);
  if (!end) return;
  Device& state = device(segment.device);
  if (overlapsAny(state.segments, segment.address, *end)) return;  // its events came first
  state.segments[segment.address] = Segment{segment.bytes, segment.stream, segment.expandable, 0};
  state.totals.reserved += segment.bytes;
  state.totals.segments = state.segments.size();
  raisePeak(state.totals.peak_reserved, state.totals.reserved);
  for (const auto& [address, bytes] : segment.allocated_blocks) {
    std::optional<std::uint64_t> block_end = rangeEnd(address, bytes);
    if (!block_end || address < segment.address || *block_end > *end) continue;
    if (overlapsAny(state.blocks, address, *block_end)) continue;  // its event came first
    state.blocks.emplace(address, Block{bytes, segment.stream, 0, 0, false});
    state.totals.allocated += bytes;
    ++state.totals.live_blocks;
    raisePeak(state.totals.peak_allocated, state.totals.allocated);
  }
}

void DeviceMemoryLedger::addSegment(Device& device, const DeviceMemoryEvent& event,
                                    bool expandable) {
  std::optional<std::uint64_t> end = rangeEnd(event.address, event.bytes);
  if (!end) {
    ++device.totals.unmatched_events;
    return;
  }
  bool unmatched = false;
  // Fresh memory holds no segment and no block: whatever the ledger still has there was freed
  // while it was not looking.
  if (overlapsAny(device.segments, event.address, *end)) {
    removeSegmentRange(device, event.address, *end, unmatched);
    unmatched = true;
  }
  auto block = firstReaching(device.blocks, event.address);
  while (block != device.blocks.end() && block->first < *end) {
    releaseBlock(device, block++);
    unmatched = true;
  }
  if (unmatched) ++device.totals.unmatched_events;

  std::uint64_t begin = event.address;
  std::uint64_t size = event.bytes;
  std::uint32_t site = event.site;
  if (expandable) {
    // Mappings of one expandable segment are contiguous virtual memory: blocks may span two of
    // them, so adjacent mappings of the same stream become one segment.
    auto after = device.segments.find(*end);
    if (after != device.segments.end() && after->second.expandable &&
        after->second.stream == event.stream) {
      size += after->second.bytes;
      device.segments.erase(after);
    }
    auto before = device.segments.lower_bound(begin);
    if (before != device.segments.begin()) {
      --before;
      if (before->second.expandable && before->second.stream == event.stream &&
          before->first + before->second.bytes == begin) {
        begin = before->first;
        size += before->second.bytes;
        site = before->second.site;
        device.segments.erase(before);
      }
    }
  }
  device.segments[begin] = Segment{size, event.stream, expandable, site};
  device.totals.reserved += event.bytes;
  device.totals.segments = device.segments.size();
  ++device.totals.segment_allocs;
  raisePeak(device.totals.peak_reserved, device.totals.reserved);
}

void DeviceMemoryLedger::removeSegmentRange(Device& device, std::uint64_t begin, std::uint64_t end,
                                            bool& unmatched) {
  std::uint64_t removed = 0;
  auto segment = firstReaching(device.segments, begin);
  while (segment != device.segments.end() && segment->first < end) {
    std::uint64_t start = segment->first;
    Segment kept = segment->second;
    std::uint64_t stop = start + kept.bytes;
    segment = device.segments.erase(segment);
    removed += std::min(stop, end) - std::max(start, begin);
    // An unmap may take pages from the middle or an end of a segment: keep the rest.
    if (start < begin)
      device.segments[start] = Segment{begin - start, kept.stream, kept.expandable, kept.site};
    if (stop > end) {
      segment =
          device.segments.emplace(end, Segment{stop - end, kept.stream, kept.expandable, kept.site})
              .first;
      ++segment;
    }
  }
  if (removed < end - begin) unmatched = true;  // part of the range was not reserved
  if (removed > 0) ++device.totals.segment_frees;
  device.totals.reserved = minusOrZero(device.totals.reserved, removed);
  device.totals.segments = device.segments.size();

  // The allocator frees only unused memory: blocks still there were freed unseen.
  auto block = firstReaching(device.blocks, begin);
  while (block != device.blocks.end() && block->first < end) {
    releaseBlock(device, block++);
    unmatched = true;
  }
}

void DeviceMemoryLedger::releaseBlock(Device& device, BlockMap::iterator block) {
  DeviceMemoryTotals& totals = device.totals;
  if (block->second.free_requested) {
    totals.pending_free_bytes = minusOrZero(totals.pending_free_bytes, block->second.bytes);
  } else {
    totals.allocated = minusOrZero(totals.allocated, block->second.bytes);
    totals.live_blocks = minusOrZero(totals.live_blocks, 1);
    ++totals.block_frees;
  }
  if (block == device.last_block) device.last_block = device.blocks.end();
  device.blocks.erase(block);
}

void DeviceMemoryLedger::allocateBlock(Device& device, const DeviceMemoryEvent& event) {
  std::optional<std::uint64_t> end = rangeEnd(event.address, event.bytes);
  if (!end) {
    ++device.totals.unmatched_events;
    return;
  }
  bool unmatched = false;
  auto block = firstReaching(device.blocks, event.address);
  while (block != device.blocks.end() && block->first < *end) {
    releaseBlock(device, block++);  // a free we never saw
    unmatched = true;
  }
  // Kept even outside every known segment (tracing started after its segment was made): it is
  // live memory all the same, and its free must match.
  auto segment = device.segments.upper_bound(event.address);
  bool inside = segment != device.segments.begin() &&
                std::prev(segment)->first + std::prev(segment)->second.bytes >= *end;
  if (!inside) unmatched = true;
  if (unmatched) ++device.totals.unmatched_events;

  // `block` is now the first block past the new one's end: where it goes, found once.
  device.last_block = device.blocks.emplace_hint(
      block, event.address, Block{event.bytes, event.stream, event.site, event.step, false});
  DeviceMemoryTotals& totals = device.totals;
  totals.allocated += event.bytes;
  ++totals.live_blocks;
  ++totals.block_allocs;
  raisePeak(totals.peak_allocated, totals.allocated);
  raisePeak(device.step_peak_allocated, totals.allocated);
}

void DeviceMemoryLedger::freeBlock(Device& device, const DeviceMemoryEvent& event) {
  auto block = device.last_block != device.blocks.end() && device.last_block->first == event.address
                   ? device.last_block
                   : device.blocks.find(event.address);
  if (block == device.blocks.end()) {
    ++device.totals.unmatched_events;
    return;
  }
  if (event.kind == DeviceEventKind::kBlockFreeCompleted) {
    // Also ends a block whose request we missed: its bytes leave `allocated` here instead.
    releaseBlock(device, block);
    return;
  }
  if (block->second.free_requested) {  // requested twice
    ++device.totals.unmatched_events;
    return;
  }
  // Like the allocator's own stats: allocated drops now, the bytes stay occupied until the
  // streams that used the block are done with it.
  DeviceMemoryTotals& totals = device.totals;
  device.last_block = block;
  block->second.free_requested = true;
  totals.allocated = minusOrZero(totals.allocated, block->second.bytes);
  totals.live_blocks = minusOrZero(totals.live_blocks, 1);
  totals.pending_free_bytes += block->second.bytes;
  ++totals.block_frees;
}

FreeSpace DeviceMemoryLedger::freeSpaceOf(const Device& device, const std::uint64_t* only_stream) {
  FreeSpace space;
  for (const auto& [start, segment] : device.segments) {
    if (only_stream != nullptr && segment.stream != *only_stream) continue;
    std::uint64_t end = start + segment.bytes;
    auto block = firstReaching(device.blocks, start);
    bool occupied = false;
    std::uint64_t cursor = start;
    std::uint64_t gaps = 0;
    std::uint64_t gap_bytes = 0;
    auto addGap = [&](std::uint64_t gap) {
      ++gaps;
      gap_bytes += gap;
      space.largest_free_extent = std::max(space.largest_free_extent, gap);
    };
    for (; block != device.blocks.end() && block->first < end; ++block) {
      occupied = true;
      std::uint64_t block_start = std::max(block->first, start);
      if (block_start > cursor) addGap(block_start - cursor);
      cursor = std::max(cursor, std::min(block->first + block->second.bytes, end));
    }
    if (cursor < end) addGap(end - cursor);
    if (occupied) {
      space.inactive_split_blocks += gaps;
      space.inactive_split_bytes += gap_bytes;
    } else {
      ++space.free_segments;
      space.free_segment_bytes += segment.bytes;
    }
  }
  return space;
}

void DeviceMemoryLedger::recordOom(Device& device, const DeviceMemoryEvent& event) {
  // The failing request was never applied, so the ledger holds the state just before it.
  ++device.totals.out_of_memory;
  OomRecord record;
  record.device = event.device;
  record.requested_bytes = event.bytes;
  record.stream = event.stream;
  record.allocated = device.totals.allocated;
  record.reserved = device.totals.reserved;
  record.device_free_bytes = event.device_free_bytes;
  record.step = event.step;
  FreeSpace space = freeSpaceOf(device, nullptr);
  record.largest_free_extent = space.largest_free_extent;
  record.inactive_split_blocks = space.inactive_split_blocks;
  record.inactive_split_bytes = space.inactive_split_bytes;
  record.largest_free_extent_on_stream = freeSpaceOf(device, &event.stream).largest_free_extent;
  record.largest_sites = liveBlocksBySite(event.device, kOomTopSites);
  record.largest_blocks = largestLiveBlocks(event.device, kOomTopBlocks);
  device.last_oom = std::move(record);
}

void DeviceMemoryLedger::endStep(std::uint32_t step) {
  for (auto& [index, state] : devices_) {
    FreeSpace space = freeSpaceOf(state, nullptr);
    DeviceStepSample sample;
    sample.step = step;
    sample.allocated = state.totals.allocated;
    sample.reserved = state.totals.reserved;
    sample.largest_free_extent = space.largest_free_extent;
    sample.inactive_split_blocks = space.inactive_split_blocks;
    sample.inactive_split_bytes = space.inactive_split_bytes;
    sample.peak_allocated = std::max(state.step_peak_allocated, state.totals.allocated);
    sample.free_segment_bytes = space.free_segment_bytes;
    state.samples.push_back(sample);
    common::thinOlderHalf(state.samples, kMaxDeviceStepSamples);
    state.step_peak_allocated = state.totals.allocated;
  }
}

std::vector<int> DeviceMemoryLedger::devices() const {
  std::vector<int> indices;
  for (const auto& entry : devices_) indices.push_back(entry.first);
  return indices;
}

DeviceMemoryTotals DeviceMemoryLedger::totals(int device) const {
  const Device* state = findDevice(device);
  return state == nullptr ? DeviceMemoryTotals{} : state->totals;
}

FreeSpace DeviceMemoryLedger::freeSpace(int device) const {
  const Device* state = findDevice(device);
  return state == nullptr ? FreeSpace{} : freeSpaceOf(*state, nullptr);
}

std::vector<LiveBlockGroup> DeviceMemoryLedger::liveBlocksBySite(int device, std::size_t limit,
                                                                 std::uint32_t since_step,
                                                                 std::uint32_t until_step) const {
  std::vector<LiveBlockGroup> groups;
  const Device* state = findDevice(device);
  if (state == nullptr) return groups;
  std::map<std::uint32_t, LiveBlockGroup> by_site;
  for (const auto& [address, block] : state->blocks) {
    if (block.free_requested) continue;  // no longer the program's
    if (block.step < since_step || block.step > until_step) continue;
    LiveBlockGroup& group = by_site[block.site];
    group.site = block.site;
    ++group.blocks;
    group.bytes += block.bytes;
  }
  for (const auto& entry : by_site) groups.push_back(entry.second);
  std::sort(groups.begin(), groups.end(), [](const LiveBlockGroup& a, const LiveBlockGroup& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  if (limit > 0 && groups.size() > limit) groups.resize(limit);
  return groups;
}

std::vector<LiveBlockSummary> DeviceMemoryLedger::largestLiveBlocks(int device,
                                                                    std::size_t limit) const {
  std::vector<LiveBlockSummary> blocks;
  const Device* state = findDevice(device);
  if (state == nullptr) return blocks;
  for (const auto& [address, block] : state->blocks) {
    if (block.free_requested) continue;
    blocks.push_back({address, block.bytes, block.site, block.step, block.stream});
  }
  auto larger = [](const LiveBlockSummary& a, const LiveBlockSummary& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.address < b.address;
  };
  if (limit > 0 && blocks.size() > limit) {
    std::partial_sort(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(limit),
                      blocks.end(), larger);
    blocks.resize(limit);
  } else {
    std::sort(blocks.begin(), blocks.end(), larger);
  }
  return blocks;
}

std::vector<LiveBlockSummary> DeviceMemoryLedger::occupiedBlocks(int device) const {
  std::vector<LiveBlockSummary> blocks;
  const Device* state = findDevice(device);
  if (state == nullptr) return blocks;
  blocks.reserve(state->blocks.size());
  for (const auto& [address, block] : state->blocks) {
    blocks.push_back(
        {address, block.bytes, block.site, block.step, block.stream, block.free_requested});
  }
  return blocks;
}

std::vector<LiveSegment> DeviceMemoryLedger::liveSegments(int device) const {
  std::vector<LiveSegment> segments;
  const Device* state = findDevice(device);
  if (state == nullptr) return segments;
  for (const auto& [address, segment] : state->segments) {
    segments.push_back(
        {address, segment.bytes, segment.stream, segment.expandable, segment.site, {}});
  }
  // Both maps are by address and never overlap within themselves, so one walk places each block.
  std::vector<LiveSegment> orphans;
  std::size_t next = 0;
  for (const auto& [address, block] : state->blocks) {
    while (next < segments.size() && segments[next].address + segments[next].bytes <= address) {
      ++next;
    }
    LiveBlockSummary summary{address,    block.bytes,  block.site,
                             block.step, block.stream, block.free_requested};
    bool inside = next < segments.size() && segments[next].address <= address &&
                  address + block.bytes <= segments[next].address + segments[next].bytes;
    if (inside) {
      segments[next].blocks.push_back(summary);
    } else {
      orphans.push_back({address, block.bytes, block.stream, false, block.site, {summary}});
    }
  }
  if (orphans.empty()) return segments;
  segments.insert(segments.end(), orphans.begin(), orphans.end());
  std::stable_sort(
      segments.begin(), segments.end(),
      [](const LiveSegment& a, const LiveSegment& b) { return a.address < b.address; });
  // A block that lost events may reach past its segment (or span two): the viewers need segments
  // that never overlap, so overlapping ones become one that covers them all.
  std::vector<LiveSegment> merged;
  for (LiveSegment& segment : segments) {
    if (!merged.empty() && segment.address < merged.back().address + merged.back().bytes) {
      LiveSegment& into = merged.back();
      into.bytes =
          std::max(into.address + into.bytes, segment.address + segment.bytes) - into.address;
      into.blocks.insert(into.blocks.end(), segment.blocks.begin(), segment.blocks.end());
      std::sort(into.blocks.begin(), into.blocks.end(),
                [](const LiveBlockSummary& a, const LiveBlockSummary& b) {
                  return a.address < b.address;
                });
      continue;
    }
    merged.push_back(std::move(segment));
  }
  return merged;
}

const std::vector<DeviceStepSample>& DeviceMemoryLedger::stepSamples(int device) const {
  static const std::vector<DeviceStepSample> kNone;
  const Device* state = findDevice(device);
  return state == nullptr ? kNone : state->samples;
}

const std::optional<OomRecord>& DeviceMemoryLedger::lastOom(int device) const {
  static const std::optional<OomRecord> kNone;
  const Device* state = findDevice(device);
  return state == nullptr ? kNone : state->last_oom;
}

std::uint64_t DeviceMemoryLedger::unmatchedEvents() const {
  std::uint64_t total = 0;
  for (const auto& entry : devices_) total += entry.second.totals.unmatched_events;
  return total;
}

}  // namespace memseal::track
