// A block registers its memory as served before anything is served from it and unregisters it
// before the memory goes back to the system, so a free by address always finds a live owner.
#include "plan/block.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "plan/asan_poison.h"
#include "plan/offset_planner.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace memseal::plan {

namespace {
constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;  // x86-64 and most arm64 kernels
}

std::size_t Block::memorySize(std::size_t bytes, bool huge_pages) {
  std::size_t size = std::max<std::size_t>(alignUp(bytes, 64), 64);
  return huge_pages && size >= kHugePageBytes ? alignUp(size, kHugePageBytes) : size;
}

Block::Block(std::shared_ptr<const ArenaPlan> block_plan, std::size_t block_bytes, bool huge_pages)
    : plan(std::move(block_plan)),
      bytes(block_bytes),
      memory_size(memorySize(block_bytes, huge_pages)) {
  // What may throw comes first or frees the block itself: a constructor that throws runs no
  // destructor.
  live.reset(new std::atomic<bool>[plan->sizes.size()]);
  for (std::size_t i = 0; i < plan->sizes.size(); ++i) live[i] = false;
  live_at_offset.reset(new std::atomic<std::uint32_t>[plan->distinct_offsets.size()]);
  for (std::size_t r = 0; r < plan->distinct_offsets.size(); ++r) live_at_offset[r] = 0;
  bool whole_huge_pages = huge_pages && memory_size >= kHugePageBytes;
  memory =
      static_cast<char*>(std::aligned_alloc(whole_huge_pages ? kHugePageBytes : 64, memory_size));
  if (memory == nullptr) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  if (whole_huge_pages) madvise(memory, memory_size, MADV_HUGEPAGE);  // best effort
#endif
  // Fault every page in now, while the block is made, instead of on first use inside a replay: a
  // huge page's first touch zeroes 2 MiB, which showed as a replay's latency spike.
  for (std::size_t page = 0; page < memory_size; page += 4096) memory[page] = 0;
  try {
    track::registerServedMemory(memory, memory_size, this);
  } catch (...) {
    std::free(memory);
    throw;
  }
  MEMSEAL_POISON(memory, memory_size);
}

Block::~Block() {
  track::unregisterServedMemory(memory);
  if (retired_bytes) retired_bytes->fetch_sub(static_cast<std::int64_t>(memory_size));
  MEMSEAL_UNPOISON(memory, memory_size);
  std::free(memory);
}

c10::DataPtr Block::serve(std::uint32_t index) {
  char* data = memory + plan->offsets[index];
  MEMSEAL_UNPOISON(data, plan->sizes[index]);
  live[index].store(true, std::memory_order_release);
  live_at_offset[plan->offset_rank[index]].store(index + 1, std::memory_order_release);
  return track::servedDataPtr(data);
}

bool Block::releaseByRunner(void* data, std::int64_t& freed_by_runner) {
  if (!contains(data)) return false;
  std::atomic<std::uint32_t>* slot = liveSlot(data);
  // Only a double free (undefined with any allocator) could race with this on the same slot.
  std::uint32_t live_here = slot != nullptr ? slot->load(std::memory_order_acquire) : 0;
  if (live_here == 0) return reportForeignFree(data);
  slot->store(0, std::memory_order_release);
  markFreed(data, live_here - 1);
  ++freed_by_runner;
  return true;
}

bool Block::releaseServed(void* data) {
  if (!contains(data)) return false;
  std::atomic<std::uint32_t>* slot = liveSlot(data);
  std::uint32_t live_here = slot != nullptr ? slot->exchange(0, std::memory_order_acq_rel) : 0;
  if (live_here == 0) return reportForeignFree(data);
  markFreed(data, live_here - 1);
  release();  // may delete this block: the last thing done here
  return true;
}

std::atomic<std::uint32_t>* Block::liveSlot(const void* data) const {
  std::size_t offset = static_cast<std::size_t>(static_cast<const char*>(data) - memory);
  const std::vector<std::size_t>& offsets = plan->distinct_offsets;
  auto found = std::lower_bound(offsets.begin(), offsets.end(), offset);
  if (found == offsets.end() || *found != offset) return nullptr;
  return &live_at_offset[static_cast<std::size_t>(found - offsets.begin())];
}

void Block::markFreed(void* data, std::uint32_t index) {
  MEMSEAL_POISON(data, plan->sizes[index]);
  live[index].store(false, std::memory_order_release);
}

bool Block::reportForeignFree(const void* data) {
  std::fprintf(stderr, "memseal arena: free of %p, which is not a live arena allocation\n", data);
  return true;
}

}  // namespace memseal::plan
