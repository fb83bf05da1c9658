// The planned arena: allocation-free CPU inference by record -> plan -> replay.
//
//   memseal::PlannedArena arena;
//   for (auto& batch : batches) {
//     torch::Tensor out;
//     arena.run({batch}, [&] { out = model->forward(batch); });  // keyed by the batch's shape
//   }
//
// The first run under a key records every CPU allocation (size, order, lifetime); its plan gives
// each allocation an offset in one block. Later runs serve allocations from the block with no
// system allocator call. Tensors still alive when the region ends (its outputs) are never planned:
// they come from the normal allocator, so results handed to the caller stay valid. To make a run
// fully allocation-free, copy results into tensors made outside the region (`out.copy_(...)`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>

#include "memseal/export.h"

namespace memseal {

struct ArenaOptions {
  // Blocks of all plans together stay under this; least recently used plans are evicted first.
  std::size_t max_bytes = std::size_t{1} << 30;
  // Print the first mismatch of each key to stderr (always counted and kept in mismatches()).
  bool warn_on_mismatch = true;
  // Ask the kernel for 2 MiB pages for blocks of 2 MiB or more (madvise; effective where
  // /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise"): large activations then
  // cost fewer TLB misses. A block is rounded up to whole huge pages.
  bool huge_pages = true;
};

struct ArenaPlanSummary {
  std::string key;
  std::size_t block_bytes = 0;  // the block this plan needs
  std::size_t lower_bound = 0;  // the most bytes ever live at once: no plan can be smaller
  std::size_t naive_sum = 0;    // every planned allocation side by side, without reuse
  std::size_t planned_allocations = 0;
  std::size_t escaping_allocations =
      0;  // still alive at region end: served by the normal allocator
  std::string strategy;
};

struct ArenaStats {
  std::int64_t recordings = 0;
  std::int64_t replays = 0;
  std::int64_t unplanned_runs =
      0;  // ran on the normal allocator: plan over budget or none possible
  std::int64_t served_allocations = 0;    // from a block, no system allocator call
  std::int64_t fallback_allocations = 0;  // a replay that did not match the plan
  std::int64_t output_allocations = 0;    // planned as outputs: from the normal allocator by design
  std::int64_t mismatched_runs = 0;
  std::int64_t retired_blocks = 0;  // blocks kept until a tensor planned to die inside was freed
  std::int64_t evicted_plans = 0;
  // Memory of all blocks now: those the arena keeps, and retired ones until their last tensor is
  // freed (only the first count against ArenaOptions::max_bytes).
  std::size_t reserved_bytes = 0;
};

class MEMSEAL_API PlannedArena {
 public:
  explicit PlannedArena(ArenaOptions options = {});
  // Blocks still holding live tensors stay until those tensors are freed.
  ~PlannedArena();
  PlannedArena(const PlannedArena&) = delete;
  PlannedArena& operator=(const PlannedArena&) = delete;

  // Runs `region` on this thread with the plan recorded for `key`, recording it on first use.
  // Allocations of other threads meanwhile use the normal allocator; any thread may free tensors.
  // Safe to call from several threads at once: each concurrent run gets its own block.
  // Regions do not nest (std::logic_error). `region` returns nothing (results leave through its
  // captures) and is called, never stored: a lambda capturing anything by reference costs no
  // allocation. An empty one is std::invalid_argument.
  void run(const std::string& key, c10::function_ref<void()> region);
  // The same under the key keyFor(inputs) would give, built in a buffer of this thread that is
  // reused: no allocation per run once the buffer has grown to the key's length.
  void run(at::TensorList inputs, c10::function_ref<void()> region);

  // A key from the inputs' dtypes and shapes, e.g. "Float[8,3,64,64]" ("s" after a non-contiguous
  // one, "|" between inputs).
  static std::string keyFor(at::TensorList inputs);

  std::optional<ArenaPlanSummary> plan(const std::string& key) const;
  ArenaStats stats() const;
  // What differed in mismatched replays, in words (the most recent ones, at most 64).
  std::vector<std::string> mismatches() const;

  struct Impl;

 private:
  void runUnderKey(const std::string& key, c10::function_ref<void()> region);

  std::shared_ptr<Impl> impl_;
};

}  // namespace memseal
