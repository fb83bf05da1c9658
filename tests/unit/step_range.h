// Step numbers for the detector's unit tests, shared by the files that need them (the unit tests
// are compiled several files to a translation unit, so a helper of one file's own would clash).
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace memseal::test {

// first, first + 1, ..., last.
inline std::vector<std::uint32_t> range(std::uint32_t first, std::uint32_t last) {
  std::vector<std::uint32_t> steps(last - first + 1);
  std::iota(steps.begin(), steps.end(), first);
  return steps;
}

}  // namespace memseal::test
