// One pre-allocated block for one plan, used by one run at a time. Lifetime is one reference
// count: one reference for the arena while it keeps the block, one per tensor served from it.
// Whoever drops the last one deletes the block, and nobody touches it after their own decrement.
// While a run uses the block, the count carries kRunBias instead of per-tensor references: the
// running thread counts what it serves and frees in plain integers (no atomic read-modify-write
// per allocation) and folds the difference in when the run ends, while frees from other threads
// decrement the count as always; the bias keeps those from reaching zero meanwhile.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "plan/arena_plan.h"
#include "track/arena_region.h"

namespace memseal::plan {

struct Block final : track::ServedMemory {
  static constexpr std::int64_t kRunBias = std::int64_t{1} << 40;

  std::shared_ptr<const ArenaPlan> plan;
  char* memory = nullptr;
  std::size_t bytes = 0;
  std::size_t memory_size = 0;                // what was allocated: bytes rounded up
  std::unique_ptr<std::atomic<bool>[]> live;  // by allocation index
  // By offset rank: 1 + the index of the allocation live there now, 0 when none is.
  std::unique_ptr<std::atomic<std::uint32_t>[]> live_at_offset;
  std::atomic<std::int64_t> references{1};
  // Set when the arena lets go of the block while tensors served from it are still alive: the
  // arena's count of such bytes, which outlives the arena and drops when the block is deleted.
  std::shared_ptr<std::atomic<std::int64_t>> retired_bytes;

  // What a block for a plan of `bytes` allocates. At least one cache line, so an empty plan still
  // has a valid block; with huge pages, whole 2 MiB pages: the kernel backs them with huge pages
  // when transparent huge pages are enabled ("always", or "madvise" as asked here), cutting the TLB
  // misses of large activations.
  static std::size_t memorySize(std::size_t bytes, bool huge_pages);

  Block(std::shared_ptr<const ArenaPlan> block_plan, std::size_t block_bytes, bool huge_pages);
  ~Block() override;

  bool contains(const void* data) const {
    auto address = reinterpret_cast<std::uintptr_t>(data);
    auto begin = reinterpret_cast<std::uintptr_t>(memory);
    return address >= begin && address < begin + memory_size;
  }

  void beginRun() { references.fetch_add(kRunBias, std::memory_order_acq_rel); }
  // `served_minus_freed`: tensors the running thread served and did not free itself. Afterwards the
  // count is again one for the arena plus one per live tensor.
  void endRun(std::int64_t served_minus_freed) {
    references.fetch_add(served_minus_freed - kRunBias, std::memory_order_acq_rel);
  }

  // The DataPtr of allocation `index`, counted by the running thread (see kRunBias): simple, so
  // raw_allocate works, and freed by address.
  c10::DataPtr serve(std::uint32_t index);
  // A free by the thread running this block: counted by it, never the last reference.
  bool releaseByRunner(void* data, std::int64_t& freed_by_runner);
  // A free from any other thread, or after the run.
  bool releaseServed(void* data) override;

  // Tensors served from this block and still alive (only meaningful to the thread that ran it,
  // after endRun).
  std::int64_t liveTensors() const { return references.load(std::memory_order_acquire) - 1; }
  void release() {
    if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  // Live allocations never share bytes, so an address names at most one live allocation: the one
  // whose offset it starts at. Null when no planned allocation starts there.
  std::atomic<std::uint32_t>* liveSlot(const void* data) const;
  void markFreed(void* data, std::uint32_t index);
  // Inside the block but not a live allocation's start: a double free or a foreign pointer.
  // Leaking is safe; freeing would corrupt the block.
  static bool reportForeignFree(const void* data);
};

}  // namespace memseal::plan
