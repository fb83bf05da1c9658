// Samples kept once per step over a run of any length, in bounded memory.
#pragma once

#include <cstddef>
#include <vector>

namespace memseal::common {

// Past `limit` samples, every other sample of the older half goes. Each sample keeps its own step
// number, so rates computed from the rest stay right; recent steps keep every sample.
template <typename Sample>
void thinOlderHalf(std::vector<Sample>& samples, std::size_t limit) {
  if (samples.size() <= limit) return;
  std::vector<Sample> kept;
  std::size_t half = samples.size() / 2;
  kept.reserve(samples.size() - half / 2);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i >= half || i % 2 == 0) kept.push_back(samples[i]);
  }
  samples.swap(kept);
}

}  // namespace memseal::common
