// Any bytes as a CUDA memory snapshot for `memseal whatif` (memseal::whatIfSnapshot): the pickle
// reader (plain data only, protocols 2 to 5), the snapshot's trace, and the allocator model's
// replays under the run's own settings and the defaults tried. What must hold: the bytes are read
// or refused with std::invalid_argument and nothing else, in memory and time bounded by their
// size; what is read replays and writes as text and as JSON that reads back; every replay
// reserved at least what it allocated, and ran out of memory, if at all, at one of its events.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "memseal/whatif.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  for (bool limited : {false, true}) {
    memseal::WhatIfOptions options;
    if (limited) options.device_bytes = std::uint64_t{64} << 20;
    memseal::WhatIfReport report;
    try {
      report = memseal::whatIfSnapshot(bytes, "fuzz", options);
    } catch (const std::invalid_argument&) {
      return 0;
    }
    if (report.settings.empty() || report.allocations == 0) std::abort();
    for (const memseal::WhatIfSetting& row : report.settings) {
      if (row.reserved_peak < row.allocated_peak) std::abort();
      if (row.out_of_memory_at && *row.out_of_memory_at >= report.events) std::abort();
    }
    if (report.toText().empty()) std::abort();
    nlohmann::json json = nlohmann::json::parse(report.toJson());
    if (json["settings"].size() != report.settings.size()) std::abort();
  }
  return 0;
}
