// The rule that separates leaks from memory that levels off, on the steps whose allocations (or
// autograd nodes) are still alive. Pure functions, so the rule is tested on its own.
#pragma once

#include <cstdint>
#include <vector>

namespace memseal::detect {

// `alive_steps`: the distinct post-warm-up steps (sorted) that still have survivors of one site.
// `first_step`..`last_step`: the post-warm-up steps completed so far.
// A site leaks when survivors come from at least 3/4 of those steps (at least 3), including steps
// from the first quarter and the last quarter: memory made early is never given back and every
// step adds more. Memory that levels off leaves survivors only from a few steps (lazy optimizer
// state, warm-up workspaces) or only from recent ones (bounded caches, gradient accumulation).
bool survivorsKeepGrowing(const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                          std::uint32_t last_step);

// Resident memory that keeps rising: least-squares slope over the samples, in bytes per step,
// when it rose in most steps and the second half rises as well as the first; 0 otherwise.
double steadyGrowthPerStep(const std::vector<std::int64_t>& samples, double min_bytes_per_step);

// Least-squares slope of samples taken once per step.
double slopePerStep(const std::vector<std::int64_t>& samples);

}  // namespace memseal::detect
