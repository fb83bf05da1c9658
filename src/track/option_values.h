// Parsing of option values shared by the environment (TrackerOptions::fromEnvironment) and the
// command line (`memseal check`), so both accept exactly the same spellings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace memseal::track {

// N of "<prefix>N", N a positive 32-bit decimal integer; nothing when `value` has another form.
inline std::optional<std::uint32_t> countAfterPrefix(const std::string& value,
                                                     const std::string& prefix) {
  if (value.rfind(prefix, 0) != 0) return std::nullopt;
  std::string digits = value.substr(prefix.size());
  if (digits.empty() || digits.size() > 10 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  unsigned long long count = std::stoull(digits);  // at most 10 digits: cannot overflow
  if (count == 0 || count > UINT32_MAX) return std::nullopt;
  return static_cast<std::uint32_t>(count);
}

}  // namespace memseal::track
