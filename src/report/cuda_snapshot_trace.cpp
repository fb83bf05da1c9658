#include "report/cuda_snapshot_trace.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "common/text.h"

namespace memseal::report {

namespace {

using Json = nlohmann::json;
using Event = explain::CudaAllocatorEvent;

// Sizes beyond any device (1 PiB) are refused: the model's sums stay far from overflowing.
constexpr std::uint64_t kMostBytes = std::uint64_t{1} << 50;

// The id of the request that ran out of memory, added as the trace's last allocation.
constexpr std::uint64_t kFailedRequest = ~std::uint64_t{0};

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("not a CUDA memory snapshot: " + what);
}

std::uint64_t unsignedField(const Json& entry, const char* key, const std::string& where) {
  auto value = entry.find(key);
  if (value == entry.end() || !value->is_number_integer() ||
      (value->is_number_integer() && !value->is_number_unsigned() &&
       value->get<std::int64_t>() < 0)) {
    refuse(where + " has no " + key + " that is a whole number");
  }
  std::uint64_t number = value->get<std::uint64_t>();
  if (std::string(key) != "addr" && number > kMostBytes) {
    refuse(where + "'s " + key + " is more memory than any device holds");
  }
  return number;
}

std::int64_t streamOf(const Json& entry) {
  auto stream = entry.find("stream");
  if (stream == entry.end() || !stream->is_number_integer()) return 0;
  return stream->is_number_unsigned() ? static_cast<std::int64_t>(stream->get<std::uint64_t>())
                                      : stream->get<std::int64_t>();
}

// A block goes back to its pool at free_completed, once the streams that used it are done; a trace
// with no free_completed at all (written by a tool that keeps only the program's frees) frees it
// at free_requested.
const char* freeActionOf(const Json& entries) {
  for (const Json& entry : entries) {
    if (!entry.is_object()) continue;
    auto action = entry.find("action");
    if (action != entry.end() && action->is_string() && *action == "free_completed") {
      return "free_completed";
    }
  }
  return "free_requested";
}

CudaDeviceTrace deviceTrace(const Json& entries, int device) {
  CudaDeviceTrace trace;
  trace.device = device;
  std::uint64_t reserved = 0;
  const std::string free_action = freeActionOf(entries);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Json& entry = entries[i];
    std::string where = "device_traces[" + std::to_string(device) + "][" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("action") || !entry["action"].is_string()) {
      refuse(where + " has no action");
    }
    const std::string action = entry["action"].get<std::string>();
    if (action == "alloc") {
      trace.events.push_back({Event::Kind::kAlloc, unsignedField(entry, "addr", where),
                              unsignedField(entry, "size", where), streamOf(entry)});
      ++trace.allocations;
    } else if (action == free_action) {
      trace.events.push_back({Event::Kind::kFree, unsignedField(entry, "addr", where), 0, 0});
    } else if (action == "segment_alloc" || action == "segment_map") {
      reserved += unsignedField(entry, "size", where);
      trace.recorded_reserved_peak = std::max(trace.recorded_reserved_peak, reserved);
    } else if (action == "segment_free" || action == "segment_unmap") {
      reserved -= std::min(reserved, unsignedField(entry, "size", where));
    } else if (action == "oom") {
      // The request that failed ends the trace: what came after is the program's recovery.
      trace.out_of_memory_at = trace.events.size();
      trace.out_of_memory_requested = unsignedField(entry, "size", where);
      trace.out_of_memory_device_free = unsignedField(entry, "device_free", where);
      trace.reserved_at_out_of_memory = reserved;
      trace.events.push_back(
          {Event::Kind::kAlloc, kFailedRequest, trace.out_of_memory_requested, streamOf(entry)});
      break;
    }
  }
  return trace;
}

// The CUDA ordinal of each entry of device_traces. torch's snapshot holds one trace per CUDA
// device, in order; memseal's own --memory-viz file names its devices under "memseal" and holds the
// host's trace too ("cpu"), which is no caching allocator's and is left out (-1).
std::vector<int> cudaOrdinals(const Json& snapshot, std::size_t traces) {
  std::vector<int> ordinals(traces);
  for (std::size_t i = 0; i < traces; ++i) ordinals[i] = static_cast<int>(i);
  auto about = snapshot.find("memseal");
  if (about == snapshot.end() || !about->is_object()) return ordinals;
  auto names = about->find("devices");
  if (names == about->end() || !names->is_array() || names->size() != traces) return ordinals;
  for (std::size_t i = 0; i < traces; ++i) {
    const Json& name = (*names)[i];
    std::optional<int> ordinal =
        name.is_string() ? common::parseCudaDeviceName(name.get<std::string>()) : std::nullopt;
    ordinals[i] = ordinal.value_or(-1);
  }
  return ordinals;
}

}  // namespace

CudaSnapshotTrace cudaSnapshotTrace(const Json& snapshot) {
  if (!snapshot.is_object()) refuse("not a dict");
  auto traces = snapshot.find("device_traces");
  if (traces == snapshot.end() || !traces->is_array()) {
    refuse("no device_traces (was _record_memory_history on?)");
  }
  CudaSnapshotTrace trace;
  const std::vector<int> ordinals = cudaOrdinals(snapshot, traces->size());
  for (std::size_t index = 0; index < traces->size(); ++index) {
    const Json& entries = (*traces)[index];
    if (!entries.is_array()) refuse("device_traces[" + std::to_string(index) + "] is not a list");
    if (ordinals[index] < 0) {
      ++trace.host_traces;
      continue;
    }
    CudaDeviceTrace device_trace = deviceTrace(entries, static_cast<int>(index));
    device_trace.device = ordinals[index];
    if (device_trace.allocations > 0) trace.devices.push_back(std::move(device_trace));
  }
  auto settings = snapshot.find("allocator_settings");
  if (settings != snapshot.end() && settings->is_object()) {
    auto conf = settings->find("PYTORCH_CUDA_ALLOC_CONF");
    if (conf != settings->end() && conf->is_string())
      trace.allocator_conf = conf->get<std::string>();
  }
  return trace;
}

}  // namespace memseal::report
