// The CUDA caching allocator's events, replayed into a ledger of live segments and blocks per
// device, with a sample per step and the state at each out-of-memory. Pure (standard library
// only), so every rule is tested on synthetic event sequences without a GPU; detect/ judges the
// samples (device_diagnosis.h) and report/ writes the out-of-memory forensics (cuda_oom.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace memseal::track {

// One per c10::cuda::CUDACachingAllocator::TraceEntry action (attachAllocatorTraceTracker):
//   SEGMENT_ALLOC   -> kSegmentAlloc        cudaMalloc of a new segment (addr, size)
//   SEGMENT_FREE    -> kSegmentFree         cudaFree of a whole segment (addr)
//   SEGMENT_MAP     -> kSegmentMap          expandable segments: pages mapped at (addr, size)
//   SEGMENT_UNMAP   -> kSegmentUnmap        expandable segments: pages unmapped at (addr, size)
//   ALLOC           -> kBlockAlloc          a block handed to a tensor (addr, size)
//   FREE_REQUESTED  -> kBlockFreeRequested  the tensor let go; allocated bytes drop, but the block
//                                           stays occupied until its streams are done with it
//   FREE_COMPLETED  -> kBlockFreeCompleted  the block is back in the pool, free for reuse
//   OOM             -> kOutOfMemory         a request failed (size; TraceEntry::addr holds the
//                                           device's free bytes, like attachOutOfMemoryObserver's
//                                           device_free)
// SNAPSHOT carries no memory change and has no kind here.
enum class DeviceEventKind {
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kBlockAlloc,
  kBlockFreeRequested,
  kBlockFreeCompleted,
  kOutOfMemory,
};

struct DeviceMemoryEvent {
  DeviceEventKind kind = DeviceEventKind::kBlockAlloc;
  int device = 0;
  std::uint64_t address = 0;  // segment or block start; unused for kOutOfMemory
  std::uint64_t bytes = 0;    // segment, mapping or block size; the failed request for an OOM
  std::uint64_t stream = 0;
  std::uint32_t site = 0;  // interned allocation site of a block (kBlockAlloc)
  std::uint32_t step = 0;  // the loop step the event happened in
  std::int64_t time_ns = 0;
  std::uint64_t device_free_bytes = 0;  // kOutOfMemory only: cudaMemGetInfo's free bytes
};

// A segment the allocator already had when its events started reaching the ledger (the hook
// attached, or a session started, after CUDA had memory), from its snapshot: where it is and the
// blocks in it that a tensor holds.
struct DeviceSegmentSeed {
  int device = 0;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t stream = 0;
  bool expandable = false;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> allocated_blocks;  // address, bytes
};

// Live blocks of one allocation site.
struct LiveBlockGroup {
  std::uint32_t site = 0;
  std::uint64_t blocks = 0;
  std::uint64_t bytes = 0;
};

struct LiveBlockSummary {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint32_t site = 0;
  std::uint32_t step = 0;  // allocated in
  std::uint64_t stream = 0;
  bool free_requested = false;  // freed by the program, still in use by a stream
};

// One reserved segment and the blocks that occupy it, as torch.cuda.memory._snapshot() lists them
// (the memory_viz export writes these). `blocks` are by address and lie inside the segment; the
// gaps between them are free (the snapshot's "inactive" blocks).
struct LiveSegment {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t stream = 0;
  bool expandable = false;  // made by kSegmentMap (expandable segments), mappings merged
  std::uint32_t site = 0;   // the op running when it was made (0: unknown)
  std::vector<LiveBlockSummary> blocks;
};

// Free space inside the reserved segments of one device, at one moment.
struct FreeSpace {
  std::uint64_t largest_free_extent = 0;  // biggest contiguous free range inside one segment
  // Free gaps inside segments that also hold occupied blocks: torch.cuda.empty_cache() cannot
  // return them, and a request larger than each of them cannot use them.
  std::uint64_t inactive_split_blocks = 0;
  std::uint64_t inactive_split_bytes = 0;
  // Segments with nothing in them: the cache empty_cache() would return to the driver.
  std::uint64_t free_segments = 0;
  std::uint64_t free_segment_bytes = 0;
};

// Totals and counters of one device. Only what is live is kept; these are fixed-size.
struct DeviceMemoryTotals {
  std::uint64_t allocated = 0;           // bytes of live blocks (free not yet requested)
  std::uint64_t pending_free_bytes = 0;  // freed by the program, still in use by a stream
  std::uint64_t reserved = 0;            // bytes of segments (mapped bytes when expandable)
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t live_blocks = 0;
  std::uint64_t segments = 0;
  std::uint64_t segment_allocs = 0;  // kSegmentAlloc and kSegmentMap applied
  std::uint64_t segment_frees = 0;   // kSegmentFree and kSegmentUnmap applied
  std::uint64_t block_allocs = 0;
  std::uint64_t block_frees = 0;  // blocks whose bytes left `allocated`
  std::uint64_t out_of_memory = 0;
  // Events that matched nothing the ledger knows (a free of an unknown block or segment, a block
  // outside every segment, a block or segment on top of a live one): tracing started late or lost
  // events. They are tolerated, never make a total negative, and are counted here.
  std::uint64_t unmatched_events = 0;
};

// The state of one device at the end of a step.
struct DeviceStepSample {
  std::uint32_t step = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t largest_free_extent = 0;
  std::uint64_t inactive_split_blocks = 0;
  std::uint64_t inactive_split_bytes = 0;
  // The highest `allocated` since the previous sample: the step's own need, which the cache
  // must hold anyway. Reserved memory above it is what caching or fragmentation costs.
  std::uint64_t peak_allocated = 0;
  std::uint64_t free_segment_bytes = 0;  // whole free segments (see FreeSpace)
};

// The state of a device just before a request failed with out-of-memory.
struct OomRecord {
  int device = 0;
  std::uint64_t requested_bytes = 0;
  std::uint64_t stream = 0;  // of the failing request
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t device_free_bytes = 0;
  std::uint64_t largest_free_extent = 0;            // in any segment
  std::uint64_t largest_free_extent_on_stream = 0;  // in the request's stream's segments
  std::uint32_t step = 0;
  std::uint64_t inactive_split_blocks = 0;
  std::uint64_t inactive_split_bytes = 0;
  std::vector<LiveBlockGroup> largest_sites;     // by bytes, largest first
  std::vector<LiveBlockSummary> largest_blocks;  // by bytes, largest first
};

// A block event as an out-of-memory's replay needs it (explain/cuda_oom_replay.h): the caching
// allocator's fragmentation follows from the order of allocations and frees, not from what is live
// alone. Kept compact: a ring of the newest is kept for every process that uses CUDA.
struct BlockHistoryEvent {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;  // an allocation's; 0 for a free
  std::uint64_t stream = 0;
  std::int32_t device = 0;
  bool allocation = true;  // false: the block went back to its pool (kBlockFreeCompleted)
};

// What led to an out-of-memory on one device: the block events before the failed request, oldest
// first, and every block that was live or waiting for its streams then.
struct OomHistory {
  std::vector<BlockHistoryEvent> events;  // the device's
  std::uint64_t dropped = 0;  // older events of the session (any device's) no longer held
  std::vector<LiveBlockSummary> live_blocks;
};

// Block events kept for the replay of an out-of-memory: 32 bytes each, 2 MiB in all, about the
// allocations and frees of a large model's training step.
constexpr std::size_t kOomHistoryEvents = std::size_t{1} << 16;

// Sites and blocks an OomRecord keeps.
constexpr std::size_t kOomTopSites = 10;
constexpr std::size_t kOomTopBlocks = 10;
// Step samples kept per device; past it, every other sample of the older half goes.
constexpr std::size_t kMaxDeviceStepSamples = 16384;

// Applies allocator events in the order they happened, per device. Memory: the live segments and
// blocks (bounded by what the program itself holds), fixed counters, the step samples (thinned
// past kMaxDeviceStepSamples) and the last OomRecord of each device.
class DeviceMemoryLedger {
 public:
  void apply(const DeviceMemoryEvent& event);
  // Adds a segment the allocator had before its events came, with its allocated blocks, unless the
  // ledger already knows memory in its range (its own events came first): no event is counted.
  // Without it, blocks freed later would match nothing and reserved memory would read low.
  void seed(const DeviceSegmentSeed& segment);
  // Appends one DeviceStepSample per device seen so far.
  void endStep(std::uint32_t step);

  std::vector<int> devices() const;  // seen so far, ascending
  // Unknown devices read as empty.
  DeviceMemoryTotals totals(int device) const;
  // One pass over the device's segments and blocks.
  FreeSpace freeSpace(int device) const;
  // Live blocks grouped by site, largest bytes first (ties: lower site first); `limit` 0 = all.
  // Only blocks allocated in `since_step` or later (0: all) and in `until_step` or earlier.
  std::vector<LiveBlockGroup> liveBlocksBySite(
      int device, std::size_t limit = 0, std::uint32_t since_step = 0,
      std::uint32_t until_step = std::numeric_limits<std::uint32_t>::max()) const;
  std::vector<LiveBlockSummary> largestLiveBlocks(int device, std::size_t limit) const;
  // Every block that occupies memory, live or waiting for its streams, by address.
  std::vector<LiveBlockSummary> occupiedBlocks(int device) const;
  // Every segment of the device by address, with its live and pending-free blocks. A block the
  // ledger keeps outside every segment (tracing started after its segment was made) comes as a
  // segment of its own (`site` its block's), so every block lies in a segment, as the viewers need.
  std::vector<LiveSegment> liveSegments(int device) const;
  const std::vector<DeviceStepSample>& stepSamples(int device) const;
  const std::optional<OomRecord>& lastOom(int device) const;
  std::uint64_t unmatchedEvents() const;  // over all devices

 private:
  struct Segment {
    std::uint64_t bytes = 0;
    std::uint64_t stream = 0;
    bool expandable = false;  // made by kSegmentMap: neighbouring mappings merge
    std::uint32_t site = 0;   // the op that made it (the first mapping's, when merged)
  };
  struct Block {
    std::uint64_t bytes = 0;
    std::uint64_t stream = 0;
    std::uint32_t site = 0;
    std::uint32_t step = 0;
    bool free_requested = false;
  };
  using BlockMap = std::map<std::uint64_t, Block>;
  struct Device {
    Device() = default;
    Device(const Device&) = delete;  // last_block points into this Device's own map
    Device& operator=(const Device&) = delete;

    std::map<std::uint64_t, Segment> segments;  // by start address, never overlapping
    BlockMap blocks;                            // by start address, never overlapping
    // The block the last event found or made: a free's two events (requested, then completed)
    // come one after the other, and the second needs no search. Reset when that block goes.
    BlockMap::iterator last_block = blocks.end();
    DeviceMemoryTotals totals;
    std::uint64_t step_peak_allocated = 0;
    std::vector<DeviceStepSample> samples;
    std::optional<OomRecord> last_oom;
  };

  Device& device(int index);
  const Device* findDevice(int index) const;
  static FreeSpace freeSpaceOf(const Device& device, const std::uint64_t* only_stream);
  static void addSegment(Device& device, const DeviceMemoryEvent& event, bool expandable);
  static void removeSegmentRange(Device& device, std::uint64_t begin, std::uint64_t end,
                                 bool& unmatched);
  static void releaseBlock(Device& device, BlockMap::iterator block);
  static void allocateBlock(Device& device, const DeviceMemoryEvent& event);
  static void freeBlock(Device& device, const DeviceMemoryEvent& event);
  void recordOom(Device& device, const DeviceMemoryEvent& event);

  std::map<int, Device> devices_;
};

}  // namespace memseal::track
