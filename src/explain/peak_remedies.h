// What would lower a step's peak, in bytes: each remedy PyTorch's FAQ names (free what is not
// needed, checkpoint activations, gradients set to None, a smaller optimizer state, lower
// precision, in-place ops), estimated from the allocations live at the peak and their roles.
// Pure: no libtorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memseal/explain.h"

namespace memseal::explain {

// One allocation live at the peak, as the remedies need it.
struct PeakHolding {
  std::int64_t bytes = 0;
  MemoryRole role = MemoryRole::kOther;
  std::string module;  // the module path it was made in ("" for none)
  std::string op;      // the op that made it
  std::string dtype;   // "Float", ...; "" when unknown
  bool made_in_step = false;
  bool freed_in_step = false;
  std::int64_t made_at = -1;  // the step's event that made it; -1 when live as the step began
  // A gradient that backward accumulated into before the peak: the step needs it there.
  bool accumulated_before_peak = false;
};

// Most bytes first; remedies that remove nothing are left out.
std::vector<PeakRemedy> peakRemedies(const std::vector<PeakHolding>& holdings,
                                     std::int64_t parameter_bytes);

}  // namespace memseal::explain
