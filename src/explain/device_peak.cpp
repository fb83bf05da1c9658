#include "explain/device_peak.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

namespace memseal::explain {

namespace {

constexpr std::size_t kMaxSites = 32;

using Kind = track::DeviceEventKind;

struct Block {
  std::uint64_t bytes = 0;
  std::uint32_t site = 0;
  bool made_in_step = false;
  bool free_requested = false;  // by the program; the block waits for its streams
};

// The device's blocks and byte counts, moved forward one event at a time.
class DeviceReplay {
 public:
  explicit DeviceReplay(const DeviceStepEvents& step) : reserved_(step.reserved_at_start) {
    for (const track::LiveBlockSummary& block : step.blocks_at_start) {
      blocks_[block.address] = {block.bytes, block.site, false, block.free_requested};
      (block.free_requested ? pending_ : allocated_) += block.bytes;
    }
  }

  void apply(const track::DeviceMemoryEvent& event) {
    switch (event.kind) {
      case Kind::kBlockAlloc: {
        // A block still held at this address lost its free (events dropped): it goes first.
        auto held = blocks_.find(event.address);
        if (held != blocks_.end()) {
          std::uint64_t& counted = held->second.free_requested ? pending_ : allocated_;
          counted -= std::min(counted, held->second.bytes);
        }
        blocks_[event.address] = {event.bytes, event.site, true, false};
        allocated_ += event.bytes;
        break;
      }
      case Kind::kBlockFreeRequested:
      case Kind::kBlockFreeCompleted: {
        auto block = blocks_.find(event.address);
        if (block == blocks_.end()) break;  // made before the ledger knew the device
        if (!block->second.free_requested) {
          allocated_ -= std::min(allocated_, block->second.bytes);
          pending_ += block->second.bytes;
          block->second.free_requested = true;
        }
        if (event.kind == Kind::kBlockFreeCompleted) {
          pending_ -= std::min(pending_, block->second.bytes);
          blocks_.erase(block);
        }
        break;
      }
      case Kind::kSegmentAlloc:
      case Kind::kSegmentMap:
        reserved_ += event.bytes;
        break;
      case Kind::kSegmentFree:
      case Kind::kSegmentUnmap:
        reserved_ -= std::min(reserved_, event.bytes);
        break;
      case Kind::kOutOfMemory:
        break;
    }
  }

  std::uint64_t allocated() const { return allocated_; }
  std::uint64_t pending() const { return pending_; }
  std::uint64_t reserved() const { return reserved_; }
  const std::map<std::uint64_t, Block>& blocks() const { return blocks_; }

 private:
  std::map<std::uint64_t, Block> blocks_;
  std::uint64_t allocated_ = 0;
  std::uint64_t pending_ = 0;
  std::uint64_t reserved_ = 0;
};

// What the caller named the block as: only the block that held the address when it was named (one
// live when the step began for `before`, one live when it ended for `after`).
const DeviceNamed* namedAs(std::uint64_t address, const Block& block, bool freed_in_step,
                           const DeviceAddressRoles& roles) {
  if (!block.made_in_step) {
    auto named = roles.before.find(address);
    if (named != roles.before.end()) return &named->second;
  }
  if (!freed_in_step) {
    auto named = roles.after.find(address);
    if (named != roles.after.end()) return &named->second;
  }
  return nullptr;
}

MemoryRole roleOf(std::uint64_t address, const Block& block, bool freed_in_step,
                  const DeviceAddressRoles& roles) {
  if (const DeviceNamed* named = namedAs(address, block, freed_in_step, roles)) return named->role;
  if (roles.leaves.count(address) != 0) return MemoryRole::kParameters;
  if (roles.gradients.count(address) != 0) return MemoryRole::kGradients;
  if (block.made_in_step && roles.saved.count(address) != 0) return MemoryRole::kActivations;
  if (block.made_in_step && freed_in_step) return MemoryRole::kTemporaries;
  return MemoryRole::kOther;
}

// The number of events after which allocated bytes were highest (0: when the step began), with
// the baseline, end and reserved peak filled in on the way.
std::size_t eventsToPeak(const DeviceStepEvents& step, DevicePeak& peak) {
  DeviceReplay replay(step);
  peak.baseline_allocated_bytes = static_cast<std::int64_t>(replay.allocated());
  std::uint64_t highest = replay.allocated();
  std::uint64_t highest_reserved = replay.reserved();
  std::size_t events_to_peak = 0;
  for (std::size_t i = 0; i < step.events.size(); ++i) {
    replay.apply(step.events[i]);
    highest_reserved = std::max(highest_reserved, replay.reserved());
    if (replay.allocated() > highest) {
      highest = replay.allocated();
      events_to_peak = i + 1;
    }
  }
  peak.end_allocated_bytes = static_cast<std::int64_t>(replay.allocated());
  peak.reserved_peak_bytes = static_cast<std::int64_t>(highest_reserved);
  return events_to_peak;
}

// The blocks live at the peak (by address), each with whether the rest of the step freed it.
std::map<std::uint64_t, bool> liveAtPeak(const DeviceStepEvents& step, const DeviceReplay& at_peak,
                                         std::size_t events_to_peak) {
  std::map<std::uint64_t, bool> freed_later;
  for (const auto& [address, block] : at_peak.blocks()) {
    if (!block.free_requested) freed_later.emplace(address, false);
  }
  for (std::size_t i = events_to_peak; i < step.events.size(); ++i) {
    const track::DeviceMemoryEvent& event = step.events[i];
    if (event.kind != Kind::kBlockFreeRequested && event.kind != Kind::kBlockFreeCompleted) {
      continue;
    }
    auto live = freed_later.find(event.address);
    if (live != freed_later.end()) live->second = true;
  }
  return freed_later;
}

// The peak's blocks added up by role, site and module as each comes; sites named once each.
class PeakTotals {
 public:
  explicit PeakTotals(const DeviceSiteNamer& name_site) : name_site_(name_site) {}

  void add(std::uint64_t address, const Block& block, bool freed_in_step,
           const DeviceAddressRoles& roles, DevicePeak& peak) {
    auto bytes = static_cast<std::int64_t>(block.bytes);
    auto role = static_cast<std::size_t>(roleOf(address, block, freed_in_step, roles));
    peak.roles[role].bytes += bytes;
    peak.roles[role].count += 1;
    site_roles_[block.site][role] += bytes;
    DevicePeakSite& site = sites_[block.site];
    site.bytes += bytes;
    site.count += 1;
    // A parameter, its gradient and its optimizer state under the module that owns them.
    const DeviceNamed* named = namedAs(address, block, freed_in_step, roles);
    const std::string& module_name =
        named != nullptr && !named->module.empty() ? named->module : nameOf(block.site).second;
    ModuleBytes& module = modules_[module_name];
    module.module = module_name;
    module.bytes += bytes;
    module.count += 1;
    module.role_bytes[role] += bytes;
    ++peak.blocks;
  }

  // The modules and sites, largest first, at most kMaxSites of each; a site's role is the one
  // holding most of its bytes.
  void list(DevicePeak& peak) {
    for (auto& [name, module] : modules_) peak.modules.push_back(std::move(module));
    std::stable_sort(peak.modules.begin(), peak.modules.end(),
                     [](const ModuleBytes& a, const ModuleBytes& b) { return a.bytes > b.bytes; });
    if (peak.modules.size() > kMaxSites) peak.modules.resize(kMaxSites);
    std::vector<std::pair<std::uint32_t, DevicePeakSite>> largest(sites_.begin(), sites_.end());
    std::stable_sort(largest.begin(), largest.end(),
                     [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
    if (largest.size() > kMaxSites) largest.resize(kMaxSites);
    for (auto& [id, site] : largest) {
      const auto& bytes = site_roles_[id];
      site.role =
          static_cast<MemoryRole>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
      std::tie(site.op, site.scope) = nameOf(id);
      peak.sites.push_back(std::move(site));
    }
  }

 private:
  const std::pair<std::string, std::string>& nameOf(std::uint32_t site) {
    auto found = names_.find(site);
    if (found == names_.end()) {
      auto name = name_site_ ? name_site_(site) : std::pair<std::string, std::string>();
      found = names_.emplace(site, std::move(name)).first;
    }
    return found->second;
  }

  const DeviceSiteNamer& name_site_;
  std::map<std::uint32_t, std::array<std::int64_t, kMemoryRoleCount>> site_roles_;
  std::map<std::uint32_t, DevicePeakSite> sites_;
  std::map<std::string, ModuleBytes> modules_;
  std::map<std::uint32_t, std::pair<std::string, std::string>> names_;
};

}  // namespace

DevicePeak deviceStepPeak(const DeviceStepEvents& step, const DeviceAddressRoles& roles,
                          const DeviceSiteNamer& name_site) {
  DevicePeak peak;
  peak.device = step.device;
  peak.step = step.step;
  peak.events = static_cast<std::int64_t>(step.events.size());
  peak.dropped_events = step.dropped_events;
  for (int role = 0; role < kMemoryRoleCount; ++role) {
    peak.roles.push_back({static_cast<MemoryRole>(role), 0, 0});
  }
  // Two passes: the moment allocated bytes were highest, then the state at that moment.
  const std::size_t events_to_peak = eventsToPeak(step, peak);
  DeviceReplay at_peak(step);
  for (std::size_t i = 0; i < events_to_peak; ++i) at_peak.apply(step.events[i]);
  peak.allocated_bytes = static_cast<std::int64_t>(at_peak.allocated());
  peak.reserved_bytes = static_cast<std::int64_t>(at_peak.reserved());
  peak.pending_free_bytes = static_cast<std::int64_t>(at_peak.pending());
  PeakTotals totals(name_site);
  for (const auto& [address, freed_in_step] : liveAtPeak(step, at_peak, events_to_peak)) {
    totals.add(address, at_peak.blocks().at(address), freed_in_step, roles, peak);
  }
  totals.list(peak);
  return peak;
}

}  // namespace memseal::explain
