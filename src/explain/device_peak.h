// The highest moment of one CUDA device in one step, replayed from the blocks occupied when the
// step began and the caching allocator's events of the step (track/device_events.h): allocated
// and reserved bytes then, and who held the blocks, by role and site. Pure, so it is tested on
// synthetic event sequences without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memseal/explain.h"
#include "track/device_ledger.h"

namespace memseal::explain {

struct DeviceStepEvents {
  int device = 0;
  std::uint32_t step = 0;
  std::vector<track::LiveBlockSummary> blocks_at_start;  // occupied when the step began
  std::uint64_t reserved_at_start = 0;
  std::vector<track::DeviceMemoryEvent> events;  // the device's, in order
  std::uint64_t dropped_events = 0;
};

// Device addresses the step's tensors were known by: what the caller named before and after the
// step (a block live at the start takes `before`'s role, one live at the end `after`'s), and what
// backward saw: the leaves it reached, the gradients it accumulated into, the tensors autograd
// saved for it.
struct DeviceNamed {
  MemoryRole role = MemoryRole::kOther;
  std::string module;  // the module the caller said owns it; "" where it did not
};
struct DeviceAddressRoles {
  std::unordered_map<std::uint64_t, DeviceNamed> before;
  std::unordered_map<std::uint64_t, DeviceNamed> after;
  std::unordered_set<std::uint64_t> leaves;
  std::unordered_set<std::uint64_t> gradients;
  std::unordered_set<std::uint64_t> saved;
};

// The op and MEMSEAL_REGION of an interned site.
using DeviceSiteNamer = std::function<std::pair<std::string, std::string>(std::uint32_t site)>;

DevicePeak deviceStepPeak(const DeviceStepEvents& step, const DeviceAddressRoles& roles,
                          const DeviceSiteNamer& name_site);

}  // namespace memseal::explain
