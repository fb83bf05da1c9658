// "Would this allocator setting have avoided the out-of-memory error, and what would the reserved
// peak have been?": the allocations of a CUDA memory snapshot's trace replayed through memseal's
// model of PyTorch's caching allocator (torch 2.11's rules), under the run's own settings and
// under each setting asked about (`memseal whatif`, docs/guides/whatif.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memseal/export.h"

namespace memseal {

struct WhatIfOptions {
  // Settings to try, as PYTORCH_CUDA_ALLOC_CONF says them ("expandable_segments:True"); empty:
  // expandable_segments:True, max_split_size_mb:128 and roundup_power2_divisions:4.
  std::vector<std::string> settings;
  // The device memory the run may take; none: what the allocator had reserved at the recorded
  // out-of-memory error and the device's free memory then, else unlimited.
  std::optional<std::uint64_t> device_bytes;
  int device = -1;  // the trace's device to replay; -1: the first with allocations
};

// One setting replayed.
struct WhatIfSetting {
  std::string setting;  // as asked for; "(as recorded) ..." for the run's own
  std::uint64_t reserved_peak = 0;
  std::uint64_t allocated_peak = 0;
  std::uint64_t largest_free_block_at_peak = 0;  // fragmentation: the largest cached block then
  std::optional<std::size_t> out_of_memory_at;   // the event that would have failed
  // Then, once the cache was freed in trying: reserved memory, and how much of it and the largest
  // block in it were free (fragmentation).
  std::uint64_t reserved_at_out_of_memory = 0;
  std::uint64_t free_at_out_of_memory = 0;
  std::uint64_t largest_free_block_at_out_of_memory = 0;
  std::size_t cache_flushes = 0;  // times every cached block was freed to make room
};

struct MEMSEAL_API WhatIfReport {
  std::string source;
  int device = 0;
  std::size_t events = 0;
  std::size_t allocations = 0;
  std::optional<std::uint64_t> device_bytes;  // none: unlimited
  std::string device_bytes_from;
  // What the allocator itself recorded: its reserved peak (from the trace's segment events) and
  // the out-of-memory error, the event (the request that failed, the replay's last) and its size.
  std::uint64_t recorded_reserved_peak = 0;
  std::optional<std::size_t> recorded_out_of_memory_at;
  std::uint64_t recorded_out_of_memory_requested = 0;
  // Keys of the run's own PYTORCH_CUDA_ALLOC_CONF the model does not know (a newer torch's):
  // replayed without them.
  std::vector<std::string> ignored_settings;
  std::vector<WhatIfSetting> settings;  // the run's own first

  std::string toText() const;
  // Schema "memseal.whatif/1".
  std::string toJson() const;
};

// `snapshot`: the bytes of a pickle of torch.cuda.memory._snapshot() (as _dump_snapshot writes it,
// after _record_memory_history), or of memseal's --memory-viz file; `source` names it in the
// report. Throws std::invalid_argument saying what is wrong (not such a pickle, no allocation in
// its trace, a setting the allocator would not take).
MEMSEAL_API WhatIfReport whatIfSnapshot(const std::string& snapshot, const std::string& source,
                                        const WhatIfOptions& options = {});

}  // namespace memseal
