// The settings of PyTorch's CUDA caching allocator that change what it reserves, read from
// PYTORCH_CUDA_ALLOC_CONF's syntax as torch 2.11 reads them, and its sizes: how a request is
// rounded and how large a segment it takes (explain/cuda_allocator_model.h replays them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memseal::explain {

// The caching allocator's sizes (CUDACachingAllocator.cpp, c10/core/AllocatorConfig.h).
namespace cuda_sizes {
inline constexpr std::uint64_t kMinBlockSize = 512;        // every size is rounded to this
inline constexpr std::uint64_t kSmallSize = 1 << 20;       // the small pool's largest request
inline constexpr std::uint64_t kSmallBuffer = 2 << 20;     // a small pool's segment
inline constexpr std::uint64_t kLargeBuffer = 20 << 20;    // a segment for requests below...
inline constexpr std::uint64_t kMinLargeAlloc = 10 << 20;  // ...this; larger ones rounded to...
inline constexpr std::uint64_t kRoundLarge = 2 << 20;      // ...this
inline constexpr std::uint64_t kMiB = 1 << 20;
}  // namespace cuda_sizes

// The caching allocator's settings that change what it reserves, as PYTORCH_CUDA_ALLOC_CONF says
// them ("max_split_size_mb:128,garbage_collection_threshold:0.8").
struct CudaAllocatorSettings {
  // Blocks of this size or more are never split; none: no limit.
  std::optional<std::uint64_t> max_split_size;
  // A request of max_split_size or more takes a cached block less than this much larger.
  std::uint64_t max_non_split_rounding = cuda_sizes::kLargeBuffer;
  // Per power-of-two interval of sizes from 1 MiB (index 0: below 2 MiB) to 64 GiB (index 15: 32
  // GiB and more), the divisions sizes are rounded up to; 0 or 1: to 512 bytes.
  std::vector<std::uint32_t> roundup_power2_divisions = std::vector<std::uint32_t>(16, 0);
  // Above this fraction of the memory allowed, cached blocks are freed before a new segment is
  // taken; 0: off. Acts only where the program set a per-process memory fraction.
  double garbage_collection_threshold = 0;
  bool expandable_segments = false;
  // torch.cuda.set_per_process_memory_fraction, where the program called it (the key of newer
  // torches, per_process_memory_fraction:F): the allocator takes no more than this fraction of the
  // device.
  std::optional<double> memory_fraction;

  // Reads PYTORCH_CUDA_ALLOC_CONF's syntax: comma-separated KEY:VALUE. Keys that change nothing
  // the model counts (the pinned host allocator's) are taken and ignored. Throws
  // std::invalid_argument naming the key or value it cannot take. With `unknown_keys`, a key the
  // model does not know (a newer torch's, another backend's) is added there instead of refused:
  // how a run's own settings are read, which the allocator took.
  static CudaAllocatorSettings parse(const std::string& conf,
                                     std::vector<std::string>* unknown_keys = nullptr);
  // The settings in that syntax; empty for the defaults.
  std::string text() const;
};

// Sizes as the allocator rounds them.
std::uint64_t roundedBlockSize(std::uint64_t bytes, const CudaAllocatorSettings& settings);
// The size of the segment a new block of `rounded` bytes is carved from.
std::uint64_t segmentSize(std::uint64_t rounded);

// The settings most often suggested for an out-of-memory error with memory reserved but free, in
// PYTORCH_ALLOC_CONF's syntax: what `memseal whatif` tries by default, and what the out-of-memory
// forensics try (cuda_oom_replay.h).
const std::vector<std::string>& suggestedAllocatorSettings();

// This process's allocator settings as torch 2.11 reads them when CUDA starts: PYTORCH_ALLOC_CONF,
// else PYTORCH_CUDA_ALLOC_CONF ("" when neither is set). Settings changed at run time
// (torch.cuda.memory._set_allocator_settings) are not seen.
std::string allocatorSettingsInEffect();

}  // namespace memseal::explain
