// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, torch 2.11):
// replays a sequence of allocations and frees under the allocator's settings
// (PYTORCH_CUDA_ALLOC_CONF) and says what the allocator would have reserved, how fragmented its
// cache was and whether it would have run out. It answers "would this setting have avoided the
// out-of-memory error, and what would the reserved peak have been?" from a recorded run.
//
// The rules it follows: sizes rounded to 512 bytes (or to a power-of-two division,
// roundup_power2_divisions); requests up to 1 MiB from the small pool's 2 MiB segments, larger
// ones from the large pool (20 MiB segments below 10 MiB, else the size rounded to 2 MiB); the
// smallest cached block of the stream that fits, split when what remains is large enough, blocks of
// max_split_size or more never split nor given to smaller requests; a freed block merged with its
// free neighbours; when a new segment does not fit, the oversize cached blocks freed, then every
// unsplit cached block, before giving up; garbage_collection_threshold freeing the oldest unsplit
// cached blocks when a memory fraction is set. Pure: no CUDA, tested against sequences whose
// result follows from these rules by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "explain/cuda_allocator_settings.h"

namespace memseal::explain {

// One event of a recorded run, in order.
struct CudaAllocatorEvent {
  enum class Kind { kAlloc, kFree, kEmptyCache };
  Kind kind = Kind::kAlloc;
  std::uint64_t id = 0;     // the allocation (its address in a trace); a free names an alloc's
  std::uint64_t bytes = 0;  // kAlloc: the bytes asked for
  std::int64_t stream = 0;
};

// What the allocator held, at a moment of the replay.
struct CudaAllocatorState {
  std::uint64_t reserved = 0;   // segments taken from the device
  std::uint64_t allocated = 0;  // blocks in use, as rounded
  std::uint64_t largest_free_block = 0;
  std::size_t segments = 0;
};

struct CudaAllocatorReplay {
  std::uint64_t reserved_peak = 0;
  std::uint64_t allocated_peak = 0;
  CudaAllocatorState at_reserved_peak;
  CudaAllocatorState at_end;
  // The event that ran out of memory (the replay stops there); none when all fit.
  std::optional<std::size_t> out_of_memory_at;
  std::optional<CudaAllocatorState> at_out_of_memory;
  std::size_t cache_flushes = 0;  // times every cached block was freed to make room
};

class CudaAllocatorModel {
 public:
  // `device_bytes`: the device's memory this process may take (its total less what others hold),
  // 4 PiB at most.
  CudaAllocatorModel(CudaAllocatorSettings settings, std::uint64_t device_bytes);

  // False when the allocator would have run out of memory (its cache freed in trying, as the
  // allocator frees it before it gives up).
  bool allocate(std::uint64_t id, std::uint64_t bytes, std::int64_t stream);
  // An id not allocated is ignored (a trace that began after it was made).
  void free(std::uint64_t id);
  // torch.cuda.empty_cache(): every unsplit cached block back to the device.
  void emptyCache();

  CudaAllocatorState state() const;  // walks the cached blocks for the largest
  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t allocated() const { return allocated_; }
  std::size_t cacheFlushes() const { return cache_flushes_; }

 private:
  enum class Pool { kSmall, kLarge };
  struct Block {
    std::uint64_t size = 0;
    std::uint64_t segment = 0;  // the address its segment begins at
    std::int64_t stream = 0;
    Pool pool = Pool::kSmall;
    bool allocated = false;
    bool mapped = true;  // false: address space of an expandable segment with no memory behind it
    std::uint64_t freed_at_search = 0;  // its pool's searches when it was cached (its age)
  };
  // Cached blocks by stream, size and address: the smallest that fits comes first.
  using FreeKey = std::tuple<std::int64_t, std::uint64_t, std::uint64_t>;
  struct FreeBlocks {
    std::set<FreeKey> blocks;
    std::uint64_t searches = 0;  // while garbage collection is on
  };

  FreeBlocks& pool(Pool which) { return which == Pool::kSmall ? small_ : large_; }
  std::optional<std::uint64_t> cachedBlock(Pool which, std::int64_t stream, std::uint64_t rounded);
  std::optional<std::uint64_t> newSegment(Pool which, std::int64_t stream, std::uint64_t bytes);
  // expandable_segments (cuda_allocator_expandable.cpp): memory mapped at the lowest place of the
  // stream's and pool's segments where a free block and the unmapped space after it hold
  // `rounded`, a new segment's address space where none does; the block made, not cached.
  std::optional<std::uint64_t> expandSegment(Pool which, std::int64_t stream, std::uint64_t rounded,
                                             std::uint64_t bytes_of_segment);
  // The unmapped space after a cached block, counted with it when choosing among cached blocks.
  std::uint64_t withUnmappedAfter(std::uint64_t address) const;
  // The whole pages inside a cached block of an expandable segment unmapped, as empty_cache does.
  void unmapPages(std::uint64_t address);
  // Maps `bytes` at the start of unmapped block `address`; the mapped block, merged with its free
  // mapped neighbours and not cached.
  std::uint64_t mapAt(std::uint64_t address, std::uint64_t bytes);
  // An unmapped block joined with its unmapped neighbours; a segment wholly unmapped released.
  void joinUnmapped(std::uint64_t address);
  bool expandable(std::uint64_t address) const;
  bool releaseOversizeBlocks(Pool which, std::int64_t stream, std::uint64_t rounded);
  bool releaseCachedBlocks();
  void collectGarbage();
  // A segment at `address` and the one block that spans it (mapped or not), neither cached.
  void addSegment(std::uint64_t address, std::uint64_t bytes, bool expandable, std::uint64_t page,
                  Pool which, std::int64_t stream);
  // A cached block that is a whole segment back to the device.
  void releaseSegment(std::uint64_t address);
  void cache(std::uint64_t address);
  void uncache(std::uint64_t address);
  bool wholeSegment(std::uint64_t address) const;
  std::uint64_t allowedBytes() const;
  bool gcOn() const;

  CudaAllocatorSettings settings_;
  std::uint64_t device_bytes_;
  std::map<std::uint64_t, Block> blocks_;  // by address
  struct Segment {
    std::uint64_t size = 0;  // of an expandable segment: its address space, mapped or not
    bool expandable = false;
    std::uint64_t page = 0;  // an expandable segment's pages: 2 MiB (small pool) or 20 MiB
  };
  std::map<std::uint64_t, Segment> segments_;  // by address
  // Expandable segments' unmapped blocks by stream, pool and address: the lowest place first.
  std::set<std::tuple<std::int64_t, int, std::uint64_t>> unmapped_;
  std::unordered_map<std::uint64_t, std::uint64_t> live_;  // allocation id -> block address
  FreeBlocks small_, large_;
  std::uint64_t reserved_ = 0;
  std::uint64_t allocated_ = 0;
  std::uint64_t next_segment_address_ = 0;
  std::uint64_t next_expandable_address_ = 0;
  std::size_t cache_flushes_ = 0;
};

// Replays `events` from an empty cache.
CudaAllocatorReplay replayCudaAllocator(const std::vector<CudaAllocatorEvent>& events,
                                        const CudaAllocatorSettings& settings,
                                        std::uint64_t device_bytes);

}  // namespace memseal::explain
