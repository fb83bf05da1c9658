// memseal::WhatIfReport (memseal/whatif.h) as text and JSON (memseal.whatif/1).
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/schemas.h"
#include "common/text.h"
#include "memseal/whatif.h"

namespace memseal {

namespace {

std::string bytes(std::uint64_t value) { return common::unsignedBytesText(value); }

std::string runsOut(const WhatIfSetting& row, const WhatIfReport& report) {
  if (!row.out_of_memory_at) return "no";
  std::string at = "yes, at event " + std::to_string(*row.out_of_memory_at);
  if (row.out_of_memory_at == report.recorded_out_of_memory_at) at += " (as the run did)";
  return at + ": " + bytes(row.free_at_out_of_memory) + " of " +
         bytes(row.reserved_at_out_of_memory) + " reserved free, in blocks of " +
         bytes(row.largest_free_block_at_out_of_memory) + " at most";
}

}  // namespace

std::string WhatIfReport::toText() const {
  std::ostringstream out;
  out << "memseal whatif: " << source << ", device " << device << ": "
      << common::countedText(events, "event") << " ("
      << common::countedText(allocations, "allocation") << ")\n";
  out << "the run: reserved at most " << bytes(recorded_reserved_peak);
  if (recorded_out_of_memory_at) {
    out << "; ran out of memory asking for " << bytes(recorded_out_of_memory_requested)
        << " (event " << *recorded_out_of_memory_at << ")";
  }
  out << "\n";
  if (!ignored_settings.empty()) {
    out << "the run's settings the model does not know, replayed without them: "
        << common::joinedText(ignored_settings, ", ") << "\n";
  }
  if (device_bytes) {
    out << "device memory replayed: " << bytes(*device_bytes) << " (" << device_bytes_from << ")\n";
  } else {
    out << "device memory replayed: unlimited (no out-of-memory error recorded; --device-memory "
           "sets it)\n";
  }
  std::size_t width = 24;
  for (const WhatIfSetting& row : settings) width = std::max(width, row.setting.size());
  out << "\n  " << std::left << std::setw(static_cast<int>(width)) << "setting"
      << "  reserved peak  largest free block  runs out\n";
  for (const WhatIfSetting& row : settings) {
    out << "  " << std::left << std::setw(static_cast<int>(width)) << row.setting << "  "
        << std::right << std::setw(13) << bytes(row.reserved_peak) << "  " << std::setw(18)
        << bytes(row.largest_free_block_at_peak) << "  " << runsOut(row, *this) << "\n";
  }
  out << "\nThe model follows the caching allocator of torch 2.11 (docs/guides/whatif.md); the "
         "first row against the run's own peak says how closely it followed this run.\n";
  return out.str();
}

std::string WhatIfReport::toJson() const {
  nlohmann::ordered_json json;
  json["schema"] = common::kWhatIfSchema.tag();
  json["source"] = source;
  json["device"] = device;
  json["events"] = events;
  json["allocations"] = allocations;
  json["device_bytes"] = device_bytes ? nlohmann::ordered_json(*device_bytes) : nullptr;
  json["device_bytes_from"] = device_bytes_from;
  json["recorded"] = {{"reserved_peak", recorded_reserved_peak},
                      {"out_of_memory_at", recorded_out_of_memory_at
                                               ? nlohmann::ordered_json(*recorded_out_of_memory_at)
                                               : nlohmann::ordered_json(nullptr)},
                      {"out_of_memory_requested", recorded_out_of_memory_requested},
                      {"ignored_settings", ignored_settings}};
  json["settings"] = nlohmann::ordered_json::array();
  for (const WhatIfSetting& row : settings) {
    json["settings"].push_back(
        {{"setting", row.setting},
         {"reserved_peak", row.reserved_peak},
         {"allocated_peak", row.allocated_peak},
         {"largest_free_block_at_peak", row.largest_free_block_at_peak},
         {"runs_out", row.out_of_memory_at.has_value()},
         {"out_of_memory_at", row.out_of_memory_at ? nlohmann::ordered_json(*row.out_of_memory_at)
                                                   : nlohmann::ordered_json(nullptr)},
         {"cache_flushes", row.cache_flushes},
         {"reserved_at_out_of_memory", row.reserved_at_out_of_memory},
         {"free_at_out_of_memory", row.free_at_out_of_memory},
         {"largest_free_block_at_out_of_memory", row.largest_free_block_at_out_of_memory}});
  }
  return json.dump(2) + "\n";
}

}  // namespace memseal
