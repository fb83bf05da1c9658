// Finding a loop's iteration in the ops it runs, for programs that never say where a step ends
// (`memseal run`). The outermost ATen ops a thread runs, in order, repeat with the loop: the
// iteration is the sequence's period, and an op that runs once per period marks its boundary.
// Real loops vary a little (a log line every N iterations, a first iteration unlike the rest), so
// a loop is also found when most of its iterations, not all, are the same (findLoop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace memseal::analyze {

struct RepeatingOp {
  std::uint32_t op = 0;     // the op (as the caller numbered it) that runs once per period
  std::size_t period = 0;   // ops per iteration
  std::size_t repeats = 0;  // whole periods in the part of the sequence that was judged
};

// The smallest period of the sequence's last three quarters (the first quarter is warm-up: lazy
// initialisation runs other ops), when that part holds at least `min_repeats` whole periods, and
// the first op of the last period that runs only once in it. Empty when the ops do not repeat
// exactly (data-dependent control flow), repeat too few times, or every op runs more than once per
// period. Linear in the length of the sequence (prefix function).
std::optional<RepeatingOp> findRepeatingOp(const std::vector<std::uint32_t>& ops,
                                           std::size_t min_repeats);

// A hash of a run of ops, the same however it is computed: fold each op in turn with
// `foldOp(hash, op)` from kEmptyOpsHash. An iteration's signature is the hash of its ops from its
// anchor (included) to the next anchor (excluded).
constexpr std::uint64_t kEmptyOpsHash = 0;
constexpr std::uint64_t kOpsHashBase = 1099511628211ull;  // FNV's 64-bit prime
inline std::uint64_t foldOp(std::uint64_t hash, std::uint32_t op) {
  return hash * kOpsHashBase + op + 1;
}

struct LoopShape {
  std::uint32_t anchor = 0;     // the op that starts each iteration (runs once in it)
  std::size_t period = 0;       // ops of the usual iteration
  std::size_t repeats = 0;      // usual iterations in the judged part of the sequence
  double coverage = 0;          // share of the ops, between the first and last anchor, in them
  std::uint64_t signature = 0;  // hash of the usual iteration's ops, from the anchor on
  // Hash of the usual iteration's ops in any order: the same loop seen from another anchor (the
  // same iteration, rotated) has the same content.
  std::uint64_t content = 0;
};

// The loop of the sequence's last seven eighths: exactly periodic (findRepeatingOp), or else the
// iteration that most of them repeat. For each op that could start an iteration, the ops between
// its calls are the candidate iterations; the usual one must repeat `min_repeats` times and hold
// three quarters of the ops. Of several, the shortest wins (a block of N iterations ending in a
// log line holds every op, but the iteration is one of its N). An op that splits the sequence into
// identical short runs, with a longer one at even spacing that adds a quarter or more of a run's
// ops, marks a layer inside the iteration, not the iteration: a log line every N iterations adds
// a little, the rest of a model's forward pass (its embedding and head) adds more. Ops in
// `not_anchors` never start an iteration (the ops of a loop known to lie inside a longer one: they
// run several times in each of its iterations). Empty when no op qualifies.
std::optional<LoopShape> findLoop(const std::vector<std::uint32_t>& ops, std::size_t min_repeats,
                                  const std::vector<std::uint32_t>& not_anchors = {});

// The ops of units run back to back a varying number of times: a unit of up to `max_period` ops
// repeated `min_repeats` times or more in a row, its runs in the sequence of `min_counts` different
// lengths or more (a recurrent model's time steps over sequences of several lengths, in the forward
// pass and in the backward pass). Such a unit is a loop inside a longer iteration, which its runs
// keep from repeating exactly. Sorted; empty when there is none. Linear in the sequence's length
// for each period.
std::vector<std::uint32_t> opsRepeatedAVaryingNumberOfTimes(const std::vector<std::uint32_t>& ops,
                                                            std::size_t max_period,
                                                            std::size_t min_repeats,
                                                            std::size_t min_counts);

}  // namespace memseal::analyze
