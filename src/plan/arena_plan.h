// What one recorded run of a region learned (sizes, order, lifetimes) and the plan made from it:
// each allocation's offset in one block, and which earlier allocations must be freed before it
// may take its bytes. Immutable once built; shared by every block made for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memseal/arena.h"

namespace memseal::plan {

// One recorded run: allocation i asked for sizes[i] bytes at event first_use[i] and, if freed
// inside the region, was freed at event last_use[i].
struct RecordedRun {
  std::vector<std::size_t> sizes;
  std::vector<std::uint32_t> first_use;
  std::vector<std::uint32_t> last_use;
  std::vector<bool> freed;
};

struct ArenaPlan {
  std::string key;
  std::vector<std::size_t> sizes;    // by allocation index, in the order the region asked
  std::vector<bool> escapes;         // alive at region end: an output, never planned
  std::vector<std::size_t> offsets;  // valid where !escapes
  // The distinct offsets of planned allocations, ascending, and each allocation's rank among them:
  // live allocations never share bytes, so an address in the block names at most one live one.
  std::vector<std::size_t> distinct_offsets;
  std::vector<std::uint32_t> offset_rank;  // valid where !escapes
  // For allocation j: the earlier planned allocations that share bytes with it. They must all be
  // freed before j may be served from the block.
  std::vector<std::vector<std::uint32_t>> must_be_freed;
  ArenaPlanSummary summary;
};

std::shared_ptr<const ArenaPlan> buildArenaPlan(const std::string& key, const RecordedRun& run);

}  // namespace memseal::plan
