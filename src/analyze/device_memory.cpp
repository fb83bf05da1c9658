// Replays the CUDA caching allocator's events into live segments and blocks per device, judges the
// step samples (leak, caching, fragmentation) and writes out-of-memory forensics.
//
// Invariants the ledger keeps after every event, whatever the input:
//  - segments never overlap, blocks never overlap (a new one on top of a stale one evicts it);
//  - allocated == sum of the bytes of blocks not free-requested, pending_free_bytes == the rest,
//    reserved == sum of segment bytes: totals change only together with the maps, so none can
//    go negative;
//  - an event that cannot be matched changes at most what it can prove, and counts once in
//    unmatched_events.
#include "analyze/device_memory.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "detect/growth_criterion.h"

namespace memseal::analyze {

namespace {

// Every block the caching allocator hands out is a multiple of 512 bytes: allocated memory that
// grows by less than one block per step is not an allocator-level leak.
constexpr double kMinLeakBytesPerStep = 512;
// The allocator's large segments are 20 MiB (kLargeBuffer). Reserved memory above the step's
// need by less than one such segment is allocation granularity, not a cache or a fragmented pool
// worth a verdict.
constexpr std::uint64_t kMinUnusedReservedBytes = 20ull << 20;
// Reserved above the step's peak by at least half that peak. Rounding (blocks to 512 B or 2 MiB,
// 1-10 MiB requests sharing 20 MiB segments) keeps a healthy loop well below it once its peak
// is larger than a few segments; smaller loops are covered by kMinUnusedReservedBytes.
constexpr double kMinUnusedShareOfPeak = 0.5;
// Any segment the allocator splits has a gap or two; fragmentation scatters free space over many.
constexpr std::uint64_t kMinInactiveSplitBlocks = 8;
// Fragmentation when most of the free reserved bytes sit in segments that also hold live blocks
// (empty_cache cannot return them); when most sit in wholly free segments it is caching.
constexpr double kMinSplitShareOfFree = 0.5;
// Fragmentation must hold on at least this share of the most recent quarter of the samples (and
// on the last one): one odd step boundary is not a fragmented pool.
constexpr double kMinFragmentedShareOfRecent = 0.5;
// Reserved growth after warm-up is caching only while the step's peak grew by less than half as
// much: reserved rising with allocated and levelling off is the step needing more, not the cache.
constexpr double kMaxPeakGrowthShareOfReservedGrowth = 0.5;
// steadyTensorGrowthPerStep needs this many samples before it can call growth steady.
constexpr std::size_t kMinSamplesForGrowth = 8;

constexpr std::uint64_t kMaxAddress = std::numeric_limits<std::uint64_t>::max();

// The end of [begin, begin + bytes), or nothing for an empty or wrapping range.
std::optional<std::uint64_t> rangeEnd(std::uint64_t begin, std::uint64_t bytes) {
  if (bytes == 0 || begin > kMaxAddress - bytes) return std::nullopt;
  return begin + bytes;
}

// Never below zero, even if a caller's numbers disagree.
std::uint64_t minus(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }

std::string bytes(std::uint64_t value) {
  return common::bytesText(static_cast<std::int64_t>(
      std::min<std::uint64_t>(value, std::numeric_limits<std::int64_t>::max())));
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

// Bounded memory: past kMaxDeviceStepSamples, every other sample of the older half goes. Each
// sample keeps its step number, so rates stay right.
void thinStepSamples(std::vector<DeviceStepSample>& samples) {
  if (samples.size() <= kMaxDeviceStepSamples) return;
  std::vector<DeviceStepSample> kept;
  std::size_t half = samples.size() / 2;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i >= half || i % 2 == 0) kept.push_back(samples[i]);
  }
  samples.swap(kept);
}

void raisePeak(std::uint64_t& peak, std::uint64_t value) { peak = std::max(peak, value); }

}  // namespace

// ---- The ledger ----------------------------------------------------------------------------

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
  auto next = device.segments.lower_bound(event.address);
  bool overlaps = next != device.segments.end() && next->first < *end;
  if (next != device.segments.begin()) {
    auto previous = std::prev(next);
    overlaps = overlaps || previous->first + previous->second.bytes > event.address;
  }
  if (overlaps) {
    removeSegmentRange(device, event.address, *end, unmatched);
    unmatched = true;
  }
  auto block = device.blocks.lower_bound(event.address);
  if (block != device.blocks.begin() &&
      std::prev(block)->first + std::prev(block)->second.bytes > event.address) {
    block = std::prev(block);
  }
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
  auto segment = device.segments.lower_bound(begin);
  if (segment != device.segments.begin() &&
      std::prev(segment)->first + std::prev(segment)->second.bytes > begin) {
    segment = std::prev(segment);
  }
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
  device.totals.reserved = minus(device.totals.reserved, removed);
  device.totals.segments = device.segments.size();

  // The allocator frees only unused memory: blocks still there were freed unseen.
  auto block = device.blocks.lower_bound(begin);
  if (block != device.blocks.begin() &&
      std::prev(block)->first + std::prev(block)->second.bytes > begin) {
    block = std::prev(block);
  }
  while (block != device.blocks.end() && block->first < end) {
    releaseBlock(device, block++);
    unmatched = true;
  }
}

void DeviceMemoryLedger::releaseBlock(Device& device,
                                      std::map<std::uint64_t, Block>::iterator block) {
  DeviceMemoryTotals& totals = device.totals;
  if (block->second.free_requested) {
    totals.pending_free_bytes = minus(totals.pending_free_bytes, block->second.bytes);
  } else {
    totals.allocated = minus(totals.allocated, block->second.bytes);
    totals.live_blocks = minus(totals.live_blocks, 1);
    ++totals.block_frees;
  }
  device.blocks.erase(block);
}

void DeviceMemoryLedger::allocateBlock(Device& device, const DeviceMemoryEvent& event) {
  std::optional<std::uint64_t> end = rangeEnd(event.address, event.bytes);
  if (!end) {
    ++device.totals.unmatched_events;
    return;
  }
  bool unmatched = false;
  auto block = device.blocks.lower_bound(event.address);
  if (block != device.blocks.begin() &&
      std::prev(block)->first + std::prev(block)->second.bytes > event.address) {
    block = std::prev(block);
  }
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

  device.blocks.emplace(event.address,
                        Block{event.bytes, event.stream, event.site, event.step, false});
  DeviceMemoryTotals& totals = device.totals;
  totals.allocated += event.bytes;
  ++totals.live_blocks;
  ++totals.block_allocs;
  raisePeak(totals.peak_allocated, totals.allocated);
  raisePeak(device.step_peak_allocated, totals.allocated);
}

void DeviceMemoryLedger::freeBlock(Device& device, const DeviceMemoryEvent& event) {
  auto block = device.blocks.find(event.address);
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
  block->second.free_requested = true;
  totals.allocated = minus(totals.allocated, block->second.bytes);
  totals.live_blocks = minus(totals.live_blocks, 1);
  totals.pending_free_bytes += block->second.bytes;
  ++totals.block_frees;
}

FreeSpace DeviceMemoryLedger::freeSpaceOf(const Device& device, const std::uint64_t* only_stream) {
  FreeSpace space;
  for (const auto& [start, segment] : device.segments) {
    if (only_stream != nullptr && segment.stream != *only_stream) continue;
    std::uint64_t end = start + segment.bytes;
    auto block = device.blocks.lower_bound(start);
    if (block != device.blocks.begin() &&
        std::prev(block)->first + std::prev(block)->second.bytes > start) {
      block = std::prev(block);
    }
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
    thinStepSamples(state.samples);
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
                                                                 std::uint32_t since_step) const {
  std::vector<LiveBlockGroup> groups;
  const Device* state = findDevice(device);
  if (state == nullptr) return groups;
  std::map<std::uint32_t, LiveBlockGroup> by_site;
  for (const auto& [address, block] : state->blocks) {
    if (block.free_requested) continue;  // no longer the program's
    if (block.step < since_step) continue;
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
  return segments;
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

// ---- The diagnosis -------------------------------------------------------------------------

const char* deviceVerdictName(DeviceVerdict verdict) {
  switch (verdict) {
    case DeviceVerdict::kSteady:
      return "steady";
    case DeviceVerdict::kLeak:
      return "leak";
    case DeviceVerdict::kCaching:
      return "caching";
    case DeviceVerdict::kFragmentation:
      return "fragmentation";
  }
  return "unknown";
}

namespace {

std::uint64_t stepNeed(const DeviceStepSample& sample) {
  return std::max(sample.peak_allocated, sample.allocated);
}

// Reserved memory the step does not use even at its busiest: what caching or fragmentation cost.
std::uint64_t reservedAboveNeed(const DeviceStepSample& sample) {
  return minus(sample.reserved, stepNeed(sample));
}

bool muchReservedAboveNeed(const DeviceStepSample& sample) {
  std::uint64_t above = reservedAboveNeed(sample);
  return above >= kMinUnusedReservedBytes &&
         static_cast<double>(above) >=
             kMinUnusedShareOfPeak * static_cast<double>(stepNeed(sample));
}

bool looksFragmented(const DeviceStepSample& sample) {
  std::uint64_t free_in_reserved = minus(sample.reserved, sample.allocated);
  return muchReservedAboveNeed(sample) && sample.inactive_split_blocks >= kMinInactiveSplitBlocks &&
         static_cast<double>(sample.inactive_split_bytes) >=
             kMinSplitShareOfFree * static_cast<double>(free_in_reserved);
}

std::string leakHint(const DeviceMemoryDiagnosis& d, const DeviceStepSample& first) {
  return "Allocated memory (live tensors) grows by " + bytes(d.leak_bytes_per_step) +
         " per step after warm-up and does not level off: " + bytes(first.allocated) + " at step " +
         std::to_string(first.step) + ", " + bytes(d.allocated) + " at step " +
         std::to_string(d.last_step) +
         ". That is a leak of live blocks, not the allocator's cache " + "(reserved " +
         bytes(d.reserved) + "). Something keeps tensors from every step alive: " +
         "see the leak categories and sites memseal reports for them (a list they are appended " +
         "to, a loss kept with its graph, a cache without bound).";
}

std::string cachingHint(const DeviceMemoryDiagnosis& d, bool grew) {
  std::string hint = "Not a leak: allocated memory does not grow (" + bytes(d.allocated) +
                     " at step " + std::to_string(d.last_step) + ", at most " +
                     bytes(d.peak_allocated) + " during that step) while reserved memory is " +
                     bytes(d.reserved) + ", " + bytes(d.reserved_above_peak) +
                     " more than the step needs. That is PyTorch's caching allocator keeping "
                     "freed blocks for reuse. nvidia-smi shows reserved memory, so the process "
                     "looks bigger there than what its tensors use (compare "
                     "torch.cuda.memory_allocated() with torch.cuda.memory_reserved()). "
                     "torch.cuda.empty_cache() returns the wholly free cached segments (" +
                     bytes(d.free_segment_bytes) +
                     " now) to the driver: that helps other processes on the GPU, not this "
                     "process's own peak, and later allocations pay for cudaMalloc again.";
  if (grew) {
    hint += " Reserved grew by " + bytes(d.reserved_growth) +
            " after warm-up while the step's need did not: usually tensor sizes that change "
            "from step to step, each size getting blocks of its own; steady shapes (pad or "
            "bucket variable sizes) keep it flat.";
  }
  return hint;
}

std::string oomFragmentationSentence(const OomRecord& oom) {
  return " The out-of-memory at step " + std::to_string(oom.step) + " asked for " +
         bytes(oom.requested_bytes) + ", more than the largest free piece (" +
         bytes(oom.largest_free_extent_on_stream) + ") although " +
         bytes(minus(oom.reserved, oom.allocated)) + " were free inside reserved segments.";
}

std::string fragmentationHint(const DeviceMemoryDiagnosis& d,
                              const std::optional<OomRecord>& last_oom) {
  std::string hint =
      "Not a leak: fragmentation. Reserved memory (" + bytes(d.reserved) + ") is " +
      fixed(d.reserved_to_allocated, 1) + "x allocated (" + bytes(d.allocated) + ") and " +
      std::to_string(d.inactive_split_blocks) + " free gaps totalling " +
      bytes(d.inactive_split_bytes) +
      " sit inside segments that still hold live blocks; the largest free piece is " +
      bytes(d.largest_free_extent) +
      ". A request larger than every piece gets a new segment instead. "
      "torch.cuda.empty_cache() does not help here: it returns only segments that are entirely "
      "free (" +
      bytes(d.free_segment_bytes) +
      " now), not split ones. What helps: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
      "(segments grow in place instead of piling up); keeping tensor shapes steady from step to "
      "step (pad or bucket variable sizes such as sequence lengths); allocating long-lived "
      "tensors first, or memseal's planned arena / pre-allocated pools, so small long-lived "
      "blocks do not pin large segments.";
  if (d.oom_from_fragmentation && last_oom) hint += oomFragmentationSentence(*last_oom);
  return hint;
}

}  // namespace

DeviceMemoryDiagnosis diagnoseDevice(const std::vector<DeviceStepSample>& samples,
                                     std::uint32_t warmup,
                                     const std::optional<OomRecord>& last_oom) {
  DeviceMemoryDiagnosis d;
  d.oom_from_fragmentation = last_oom && oomCause(*last_oom) == OomCause::kFragmentation;
  auto observed_begin =
      std::find_if(samples.begin(), samples.end(),
                   [&](const DeviceStepSample& sample) { return sample.step >= warmup; });
  std::vector<DeviceStepSample> observed(observed_begin, samples.end());
  d.observed_samples = observed.size();
  if (observed.empty()) {
    d.verdict = d.oom_from_fragmentation ? DeviceVerdict::kFragmentation : DeviceVerdict::kSteady;
    d.hint = "No step has ended after warm-up (step " + std::to_string(warmup) +
             ") yet: there is no trend to judge.";
    if (d.oom_from_fragmentation) d.hint += oomFragmentationSentence(*last_oom);
    return d;
  }

  const DeviceStepSample& first = observed.front();
  const DeviceStepSample& last = observed.back();
  d.first_step = first.step;
  d.last_step = last.step;
  d.allocated = last.allocated;
  d.peak_allocated = stepNeed(last);
  d.reserved = last.reserved;
  d.reserved_minus_allocated = minus(last.reserved, last.allocated);
  d.reserved_above_peak = reservedAboveNeed(last);
  d.inactive_split_blocks = last.inactive_split_blocks;
  d.inactive_split_bytes = last.inactive_split_bytes;
  d.free_segment_bytes = last.free_segment_bytes;
  d.largest_free_extent = last.largest_free_extent;
  d.reserved_to_allocated = static_cast<double>(last.reserved) /
                            static_cast<double>(std::max<std::uint64_t>(1, last.allocated));

  std::vector<std::uint32_t> steps;
  std::vector<std::int64_t> allocated;
  std::vector<std::int64_t> reserved;
  for (const DeviceStepSample& sample : observed) {
    steps.push_back(sample.step);
    allocated.push_back(static_cast<std::int64_t>(sample.allocated));
    reserved.push_back(static_cast<std::int64_t>(sample.reserved));
  }
  d.allocated_slope_per_step = detect::slopeOf(steps, allocated);
  d.reserved_slope_per_step = detect::slopeOf(steps, reserved);
  double growth = detect::steadyTensorGrowthPerStep(steps, allocated);
  d.leak_bytes_per_step = growth >= kMinLeakBytesPerStep ? growth : 0;

  // The most recent quarter of the samples (at least one): where the run has settled.
  std::size_t recent_begin = observed.size() - std::max<std::size_t>(1, observed.size() / 4);
  std::uint64_t recent_reserved = 0;
  std::uint64_t recent_need = 0;
  std::size_t recent_fragmented = 0;
  for (std::size_t i = recent_begin; i < observed.size(); ++i) {
    raisePeak(recent_reserved, observed[i].reserved);
    raisePeak(recent_need, stepNeed(observed[i]));
    recent_fragmented += looksFragmented(observed[i]) ? 1 : 0;
  }
  std::size_t recent = observed.size() - recent_begin;
  d.reserved_growth = minus(recent_reserved, first.reserved);
  std::uint64_t need_growth = minus(recent_need, stepNeed(first));

  bool fragmented =
      looksFragmented(last) && static_cast<double>(recent_fragmented) >=
                                   kMinFragmentedShareOfRecent * static_cast<double>(recent);
  bool cache_grew = d.reserved_growth >= kMinUnusedReservedBytes &&
                    static_cast<double>(need_growth) < kMaxPeakGrowthShareOfReservedGrowth *
                                                           static_cast<double>(d.reserved_growth);
  bool cache_high = muchReservedAboveNeed(last);

  if (d.leak_bytes_per_step > 0) {
    d.verdict = DeviceVerdict::kLeak;
    d.hint = leakHint(d, first);
    if (d.oom_from_fragmentation) {
      d.hint += " Fragmentation made it worse." + oomFragmentationSentence(*last_oom);
    }
  } else if (fragmented || d.oom_from_fragmentation) {
    d.verdict = DeviceVerdict::kFragmentation;
    d.hint = fragmentationHint(d, last_oom);
  } else if (cache_grew || cache_high) {
    d.verdict = DeviceVerdict::kCaching;
    d.hint = cachingHint(d, cache_grew);
  } else {
    d.verdict = DeviceVerdict::kSteady;
    d.hint = "Allocated memory does not keep growing after warm-up (" + bytes(d.allocated) +
             " at step " + std::to_string(d.last_step) + ") and reserved memory (" +
             bytes(d.reserved) + ") stays close to what the step needs (" +
             bytes(d.peak_allocated) + "): nothing to fix.";
    if (observed.size() < kMinSamplesForGrowth) {
      d.hint += " Only " + std::to_string(observed.size()) +
                " steps were observed after warm-up; growth is judged from " +
                std::to_string(kMinSamplesForGrowth) + " on.";
    }
  }
  return d;
}

// ---- Out-of-memory forensics ---------------------------------------------------------------

const char* oomCauseName(OomCause cause) {
  switch (cause) {
    case OomCause::kFragmentation:
      return "fragmentation";
    case OomCause::kProcessLimit:
      return "process-limit";
    case OomCause::kDeviceFull:
      return "device-full";
  }
  return "unknown";
}

OomCause oomCause(const OomRecord& record) {
  if (record.requested_bytes > record.largest_free_extent_on_stream &&
      minus(record.reserved, record.allocated) >= record.requested_bytes) {
    return OomCause::kFragmentation;
  }
  if (record.device_free_bytes >= record.requested_bytes) return OomCause::kProcessLimit;
  return OomCause::kDeviceFull;
}

std::string oomExplanation(const OomRecord& record) {
  std::string request = bytes(record.requested_bytes);
  switch (oomCause(record)) {
    case OomCause::kFragmentation: {
      std::string text = "Fragmentation, not a full device: the request of " + request +
                         " is larger than the largest free piece (" +
                         bytes(record.largest_free_extent_on_stream) + ") although " +
                         bytes(minus(record.reserved, record.allocated)) +
                         " of reserved memory are free (" + bytes(record.reserved) + " reserved, " +
                         bytes(record.allocated) + " allocated), in " +
                         std::to_string(record.inactive_split_blocks) +
                         " gaps inside segments that hold live blocks.";
      if (record.largest_free_extent >= record.requested_bytes) {
        text +=
            " A piece that large is free on another stream; each stream keeps its own "
            "cached segments.";
      }
      return text +
             " Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep shapes steady (pad or "
             "bucket variable sizes) or pre-allocate long-lived tensors; "
             "torch.cuda.empty_cache() cannot merge split segments.";
    }
    case OomCause::kProcessLimit:
      return "The device reports " + bytes(record.device_free_bytes) +
             " free, at least the request of " + request +
             ", yet the allocation failed: this process hit a limit of its own "
             "(torch.cuda.set_per_process_memory_fraction, a MIG slice or a container limit). "
             "Allocated " +
             bytes(record.allocated) + ", reserved " + bytes(record.reserved) + ".";
    case OomCause::kDeviceFull: {
      double in_use = record.reserved == 0 ? 0
                                           : 100.0 * static_cast<double>(record.allocated) /
                                                 static_cast<double>(record.reserved);
      return "The device is full: allocated " + bytes(record.allocated) + " of reserved " +
             bytes(record.reserved) + " (" + fixed(in_use, 0) + "% in use) and only " +
             bytes(record.device_free_bytes) + " free on the device, less than the request of " +
             request +
             ". Live tensors need more memory than there is: a leak (does allocated memory grow "
             "step after step? see the largest sites) or a workload too big for the device "
             "(smaller batch, activation checkpointing, mixed precision).";
    }
  }
  return "";
}

namespace {

std::string nameOf(const std::function<std::string(std::uint32_t)>& site_name, std::uint32_t site) {
  return site_name ? site_name(site) : "site " + std::to_string(site);
}

}  // namespace

std::string oomForensicsJson(const OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name) {
  using Json = nlohmann::ordered_json;
  Json json;
  json["schema"] = kCudaOomSchema;
  json["version"] = kCudaOomVersion;
  json["cause"] = oomCauseName(oomCause(record));
  json["explanation"] = oomExplanation(record);
  json["device"] = record.device;
  json["step"] = record.step;
  json["requested_bytes"] = record.requested_bytes;
  json["stream"] = record.stream;
  json["allocated_bytes"] = record.allocated;
  json["reserved_bytes"] = record.reserved;
  json["free_in_reserved_bytes"] = minus(record.reserved, record.allocated);
  json["device_free_bytes"] = record.device_free_bytes;
  json["largest_free_extent_bytes"] = record.largest_free_extent;
  json["largest_free_extent_on_stream_bytes"] = record.largest_free_extent_on_stream;
  json["inactive_split_blocks"] = record.inactive_split_blocks;
  json["inactive_split_bytes"] = record.inactive_split_bytes;
  Json sites = Json::array();
  for (const LiveBlockGroup& group : record.largest_sites) {
    Json site;
    site["site"] = group.site;
    site["name"] = nameOf(site_name, group.site);
    site["blocks"] = group.blocks;
    site["bytes"] = group.bytes;
    sites.push_back(std::move(site));
  }
  json["largest_sites"] = std::move(sites);
  Json blocks = Json::array();
  for (const LiveBlockSummary& block : record.largest_blocks) {
    Json entry;
    entry["address"] = common::hexAddress(static_cast<std::uintptr_t>(block.address));
    entry["bytes"] = block.bytes;
    entry["site"] = block.site;
    entry["name"] = nameOf(site_name, block.site);
    entry["step"] = block.step;
    entry["stream"] = block.stream;
    blocks.push_back(std::move(entry));
  }
  json["largest_blocks"] = std::move(blocks);
  return json.dump(2);
}

std::string oomForensicsText(const OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name) {
  std::string text = "CUDA out of memory on device " + std::to_string(record.device) + " at step " +
                     std::to_string(record.step) + ": a request of " +
                     bytes(record.requested_bytes) + " failed (" + oomCauseName(oomCause(record)) +
                     ").\n";
  text += "  " + oomExplanation(record) + "\n";
  text += "  allocated " + bytes(record.allocated) + ", reserved " + bytes(record.reserved) + " (" +
          bytes(minus(record.reserved, record.allocated)) + " free inside), device free " +
          bytes(record.device_free_bytes) + "\n";
  text += "  largest free piece " + bytes(record.largest_free_extent) + " (" +
          bytes(record.largest_free_extent_on_stream) + " on the request's stream); " +
          std::to_string(record.inactive_split_blocks) + " gaps inside used segments, " +
          bytes(record.inactive_split_bytes) + "\n";
  if (!record.largest_sites.empty()) text += "  largest live sites:\n";
  for (const LiveBlockGroup& group : record.largest_sites) {
    text += "    " + bytes(group.bytes) + " in " + std::to_string(group.blocks) + " block" +
            (group.blocks == 1 ? "" : "s") + "  " + nameOf(site_name, group.site) + "\n";
  }
  if (!record.largest_blocks.empty()) text += "  largest live blocks:\n";
  for (const LiveBlockSummary& block : record.largest_blocks) {
    text += "    " + bytes(block.bytes) + " at " +
            common::hexAddress(static_cast<std::uintptr_t>(block.address)) + ", step " +
            std::to_string(block.step) + "  " + nameOf(site_name, block.site) + "\n";
  }
  return text;
}

}  // namespace memseal::analyze
