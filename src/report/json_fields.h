// JSON of the types every report shares (a tensor's description, a stack, a rank), so that check,
// explain and the Python module write them one way; and the strict field readers of the reports'
// readers (memseal.check/1, and explain reports as the merge reads them).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "memseal/leak_detector.h"
#include "memseal/tracker.h"

namespace memseal::report {

// null when the tensor is not known; else shape, dtype, requires_grad, is_leaf, grad_fn.
nlohmann::ordered_json tensorJson(const TensorInfo& tensor);
// Innermost first: function, file, line, library, internal.
nlohmann::ordered_json framesJson(const std::vector<StackFrame>& frames);
// A distributed job's rank, as check and explain reports write it: rank, local_rank, world_size,
// run_id.
nlohmann::ordered_json rankJson(const RankIdentity& rank);
// What holds a finding (the report's "python.holders"): finding, description, kind, tensors,
// via_graph.
nlohmann::ordered_json holderJson(const LeakHolder& holder);

// ---- reading: what cannot be read is a std::invalid_argument("memseal report: ...") ----

[[noreturn]] inline void fail(const std::string& what) {
  throw std::invalid_argument("memseal report: " + what);
}

inline const nlohmann::ordered_json& field(const nlohmann::ordered_json& object, const char* name,
                                           const std::string& where) {
  if (!object.is_object()) fail(where + " is not an object");
  auto found = object.find(name);
  if (found == object.end()) fail(where + " has no \"" + name + "\"");
  return *found;
}

// An integer field holds an integer that fits its type: a float or an out-of-range number would
// be converted with undefined behaviour (and a negative one wrap into an unsigned field).
template <typename T>
bool fitsInteger(const nlohmann::ordered_json& value) {
  if (value.is_number_unsigned()) {
    return value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  }
  if (value.is_number_integer()) {
    std::int64_t number = value.get<std::int64_t>();
    return number >= 0 ? static_cast<std::uint64_t>(number) <=
                             static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                       : std::is_signed_v<T> &&
                             number >= static_cast<std::int64_t>(std::numeric_limits<T>::min());
  }
  return false;
}

template <typename T>
T read(const nlohmann::ordered_json& object, const char* name, const std::string& where) {
  const nlohmann::ordered_json& value = field(object, name, where);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (value.is_number() && !fitsInteger<T>(value)) {
      fail(where + "." + name + " is not an integer this field holds (" + value.dump() + ")");
    }
  }
  try {
    return value.get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(where + "." + name + " has the wrong type (" + value.type_name() + ")");
  }
}

template <typename T>
T readOr(const nlohmann::ordered_json& object, const char* name, const std::string& where,
         T fallback) {
  if (!object.contains(name) || object.at(name).is_null()) return fallback;
  return read<T>(object, name, where);
}

// A distributed job's rank as rankJson writes it, within the ranks a job can have (kMaxWorldSize).
RankIdentity readRank(const nlohmann::ordered_json& json, const std::string& where);
// A holder as holderJson writes it (a report, or the answer of memseal run's heap search).
LeakHolder readHolder(const nlohmann::ordered_json& json, const std::string& where);
inline constexpr int kMaxWorldSize = 1 << 24;

}  // namespace memseal::report
