// Samples kept once per step over a run of any length, in bounded memory.
#pragma once

#include <cstddef>
#include <vector>

namespace memseal::common {

// Past `limit` samples, every other sample of the older half goes. Each sample keeps its own step
// number, so rates computed from the rest stay right; recent steps keep every sample. In place: the
// vector keeps its memory, so that a caller that reserved `limit + 1` samples never reallocates
// (its resident memory then stops growing once the vector first reached the limit).
template <typename Sample>
void thinOlderHalf(std::vector<Sample>& samples, std::size_t limit) {
  if (samples.size() <= limit) return;
  std::size_t half = samples.size() / 2;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i >= half || i % 2 == 0) samples[kept++] = samples[i];
  }
  samples.erase(samples.begin() + static_cast<std::ptrdiff_t>(kept), samples.end());
}

}  // namespace memseal::common
