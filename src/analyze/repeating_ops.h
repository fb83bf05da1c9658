// Finding a loop's iteration in the ops it runs, for programs that never say where a step ends
// (`memseal run`). The outermost ATen ops a thread runs, in order, repeat with the loop: the
// iteration is the sequence's period, and an op that runs once per period marks its boundary.
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

}  // namespace memseal::analyze
