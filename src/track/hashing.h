// Small, fast hash functions for the tracker's tables (not cryptographic).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memseal::track {

inline std::uint64_t mixBits(std::uint64_t value) {
  // splitmix64's finaliser: every input bit affects every output bit.
  value ^= value >> 30;
  value *= 0xbf58476d1ce4e5b9ULL;
  value ^= value >> 27;
  value *= 0x94d049bb133111ebULL;
  value ^= value >> 31;
  return value;
}

inline std::uint64_t combineHash(std::uint64_t seed, std::uint64_t value) {
  return mixBits(seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2)));
}

inline std::uint64_t hashString(const char* text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char* c = text; *c != '\0'; ++c) {
    hash = (hash ^ static_cast<unsigned char>(*c)) * 0x100000001b3ULL;
  }
  return mixBits(hash);
}

}  // namespace memseal::track
