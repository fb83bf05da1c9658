#include "analyze/repeating_ops.h"

#include <unordered_map>

namespace memseal::analyze {

std::optional<RepeatingOp> findRepeatingOp(const std::vector<std::uint32_t>& sequence,
                                           std::size_t min_repeats) {
  const std::size_t skip = sequence.size() / 4;
  const std::size_t length = sequence.size() - skip;
  if (length < 2 || min_repeats == 0) return std::nullopt;
  const std::uint32_t* ops = sequence.data() + skip;
  // Prefix function: border[i] is the longest proper prefix of ops[0..i] that is also its suffix.
  // The sequence is p-periodic (ops[i] == ops[i + p]) for p = length - border[length - 1].
  std::vector<std::size_t> border(length, 0);
  for (std::size_t i = 1; i < length; ++i) {
    std::size_t k = border[i - 1];
    while (k > 0 && ops[i] != ops[k]) k = border[k - 1];
    if (ops[i] == ops[k]) ++k;
    border[i] = k;
  }
  const std::size_t period = length - border[length - 1];
  const std::size_t repeats = length / period;
  if (repeats < min_repeats) return std::nullopt;
  // The last whole period, and in it the first op that runs once.
  const std::uint32_t* last = ops + length - period;
  std::unordered_map<std::uint32_t, std::size_t> count;
  for (std::size_t i = 0; i < period; ++i) ++count[last[i]];
  for (std::size_t i = 0; i < period; ++i) {
    if (count[last[i]] == 1) return RepeatingOp{last[i], period, repeats};
  }
  return std::nullopt;
}

}  // namespace memseal::analyze
