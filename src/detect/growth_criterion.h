// The rules that separate leaks from memory that levels off: on the steps whose allocations (or
// autograd nodes) are still alive, and on series sampled once per step. Pure functions, so every
// rule is tested on its own.
#pragma once

#include <cstdint>
#include <vector>

namespace memseal::detect {

// No group is judged over fewer post-warm-up steps than this: a run that ends before has no
// verdict (its report says so, rather than "no leak").
inline constexpr std::uint32_t kMinJudgedSteps = 4;

// `alive_steps`: the distinct post-warm-up steps (sorted) that still have survivors of one group.
// `first_step`..`last_step`: the post-warm-up steps completed so far.
// A group leaks when survivors come from at least 3/4 of those steps (at least 3), including steps
// from the first quarter and the last quarter: memory made early is never given back and every
// step adds more. Memory that levels off leaves survivors only from a few steps (lazy optimizer
// state, warm-up workspaces) or only from recent ones (bounded caches, gradient accumulation).
bool survivorsKeepGrowing(const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                          std::uint32_t last_step);

// The rule used while tracked tensor memory as a whole grows steadily (see
// steadyTensorGrowthPerStep): survivors from every quarter of the observed steps and from at least
// a quarter of them (at least 3). It finds leaks that retain on some steps only (cache misses).
bool survivorsSpanTheRun(const std::vector<std::uint32_t>& alive_steps, std::uint32_t first_step,
                         std::uint32_t last_step);

// Tracked tensor memory at step boundaries that grows without levelling off: at least 8 samples,
// the maximum of each quarter above the previous quarter's, the last sample within 1/8 of the
// growth of the maximum, and the last quarter's minimum above the first's by at least a quarter of
// what the maximum rose. Returns the least-squares slope in bytes per step, 0 otherwise. Bounded
// caches and lazily made state rise, then stay flat: their last quarters add nothing. Work in
// flight on other threads lifts some samples only: its peaks may rise, the level it falls back to
// does not.
double steadyTensorGrowthPerStep(const std::vector<std::uint32_t>& steps,
                                 const std::vector<std::int64_t>& values);

// Resident memory that keeps rising fast: least-squares slope over the samples, in bytes per step,
// when it rose in most steps and the second half rises as well as the first; 0 otherwise.
double steadyGrowthPerStep(const std::vector<std::int64_t>& samples, double min_bytes_per_step);
// The same for samples taken at `steps` (in order, not necessarily every step): "most steps" is
// most samples, the slope is per step.
double steadyGrowthPerStep(const std::vector<std::uint32_t>& steps,
                           const std::vector<std::int64_t>& samples, double min_bytes_per_step);

// Resident memory that rises slowly but never levels off, judged over a long run: at least 200
// steps; of 8 equal segments, each segment's maximum above the previous one's in at least 6 of the
// 7 transitions, including the last two; the second half rising at least a third as fast as the
// first; `min_total_bytes` gained in all. Returns the slope in bytes per step, 0 otherwise.
// Allocators returning and re-taking memory oscillate (segment maxima do not climb); native caches
// that level off stop climbing before the end.
double unboundedGrowthPerStep(const std::vector<std::uint32_t>& steps,
                              const std::vector<std::int64_t>& values, double min_total_bytes);

// Least-squares slope of values against their steps (which need not be evenly spaced).
double slopeOf(const std::vector<std::uint32_t>& steps, const std::vector<std::int64_t>& values);

// What a series gains per step, told apart from one event: the least-squares slope, taken without
// its largest rise between two samples when that one rise is more than half of all it rose (a
// data set loaded once, a notebook cell's array: memory the steps do not add again). Growth that
// repeats rises in many small steps, or in few of like size, and keeps its slope.
double slopeWithoutOneJump(const std::vector<std::uint32_t>& steps,
                           const std::vector<std::int64_t>& values);

}  // namespace memseal::detect
