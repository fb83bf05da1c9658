#include "analyze/repeating_ops.h"

#include <algorithm>
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

namespace {

constexpr double kMinCoverage = 0.75;
// Candidate anchors per call count: ops called equally often split the sequence the same way up to
// rotation, so a few of each count are enough (and keep the search linear in practice).
constexpr std::size_t kAnchorsPerCount = 3;
constexpr std::size_t kMaxAnchors = 48;

// An op's share of an order-free hash (splitmix64 of it).
std::uint64_t contentOf(std::uint32_t op) {
  std::uint64_t x = op + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Hashes {
  std::vector<std::uint64_t> prefix;  // prefix[i]: hash of ops[0..i)
  std::vector<std::uint64_t> power;   // kOpsHashBase^i
  std::uint64_t of(std::size_t begin, std::size_t end) const {
    return prefix[end] - prefix[begin] * power[end - begin];
  }
};

// How `anchor` splits the ops into iterations, when the usual one qualifies.
std::optional<LoopShape> loopStartingAt(const std::uint32_t* ops, std::size_t size,
                                        std::uint32_t anchor, const Hashes& hashes,
                                        std::size_t min_repeats) {
  std::vector<std::size_t> calls;
  for (std::size_t i = 0; i < size; ++i) {
    if (ops[i] == anchor) calls.push_back(i);
  }
  if (calls.size() < min_repeats + 1) return std::nullopt;
  struct Seen {
    std::size_t count = 0;
    std::size_t length = 0;
  };
  std::unordered_map<std::uint64_t, Seen> iterations;
  std::vector<std::uint64_t> order;  // each iteration's hash, in order
  for (std::size_t i = 0; i + 1 < calls.size(); ++i) {
    std::uint64_t hash = hashes.of(calls[i], calls[i + 1]);
    Seen& seen = iterations[hash];
    seen.count += 1;
    seen.length = calls[i + 1] - calls[i];
    order.push_back(hash);
  }
  std::uint64_t usual = 0;
  Seen best;
  for (const auto& [hash, seen] : iterations) {
    if (seen.count > best.count || (seen.count == best.count && seen.length > best.length)) {
      usual = hash;
      best = seen;
    }
  }
  double span = static_cast<double>(calls.back() - calls.front());
  double coverage = static_cast<double>(best.count * best.length) / span;
  if (best.count < min_repeats || coverage < kMinCoverage) return std::nullopt;
  // Most runs must be the usual one: an op called twice per iteration splits it into two runs
  // that take turns.
  if (4 * best.count < 3 * order.size()) return std::nullopt;
  // A layer inside the iteration: the other runs are all alike, evenly spaced, and longer by a
  // quarter or more of a run (the rest of the iteration: an embedding, a head, a loss).
  std::vector<std::size_t> unusual;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != usual) unusual.push_back(i);
  }
  if (unusual.size() >= 2) {
    bool alike = true;
    bool even = true;
    for (std::size_t i = 1; i < unusual.size(); ++i) {
      alike = alike && order[unusual[i]] == order[unusual[0]];
      even = even && unusual[i] - unusual[i - 1] == unusual[1] - unusual[0];
    }
    std::size_t index = unusual[0];
    std::size_t length = calls[index + 1] - calls[index];
    if (alike && even && length >= best.length && 4 * (length - best.length) >= best.length) {
      return std::nullopt;
    }
  }
  LoopShape shape;
  shape.anchor = anchor;
  shape.period = best.length;
  shape.repeats = best.count;
  shape.coverage = coverage;
  shape.signature = usual;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != usual) continue;
    for (std::size_t op = calls[i]; op < calls[i + 1]; ++op) shape.content += contentOf(ops[op]);
    break;
  }
  return shape;
}

}  // namespace

std::optional<LoopShape> findLoop(const std::vector<std::uint32_t>& sequence,
                                  std::size_t min_repeats,
                                  const std::vector<std::uint32_t>& not_anchors) {
  auto may_anchor = [&](std::uint32_t op) {
    return std::find(not_anchors.begin(), not_anchors.end(), op) == not_anchors.end();
  };
  if (min_repeats == 0) return std::nullopt;
  const std::size_t skip = sequence.size() / 8;
  const std::size_t size = sequence.size() - skip;
  if (size < 2) return std::nullopt;
  const std::uint32_t* ops = sequence.data() + skip;
  Hashes hashes;
  hashes.prefix.assign(size + 1, kEmptyOpsHash);
  hashes.power.assign(size + 1, 1);
  for (std::size_t i = 0; i < size; ++i) {
    hashes.prefix[i + 1] = foldOp(hashes.prefix[i], ops[i]);
    hashes.power[i + 1] = hashes.power[i] * kOpsHashBase;
  }
  // Exactly periodic: the iteration from its op that runs once, as findRepeatingOp says. A shorter
  // iteration that most of the ops repeat still wins (a block of iterations ending in a log line
  // is exactly periodic too).
  std::optional<LoopShape> best;
  if (auto exact = findRepeatingOp(sequence, min_repeats); exact && may_anchor(exact->op)) {
    if (auto shape = loopStartingAt(ops, size, exact->op, hashes, min_repeats)) {
      if (shape->period == exact->period) best = shape;
    }
  }
  // Candidate anchors: ops called often enough, a few per call count (the first seen of each).
  std::unordered_map<std::uint32_t, std::size_t> calls;
  std::vector<std::uint32_t> first_seen;
  for (std::size_t i = 0; i < size; ++i) {
    if (calls[ops[i]]++ == 0) first_seen.push_back(ops[i]);
  }
  std::unordered_map<std::size_t, std::size_t> per_count;
  std::vector<std::uint32_t> anchors;
  for (std::uint32_t op : first_seen) {
    std::size_t count = calls[op];
    if (count < min_repeats + 1 || !may_anchor(op) || per_count[count]++ >= kAnchorsPerCount) {
      continue;
    }
    anchors.push_back(op);
    if (anchors.size() == kMaxAnchors) break;
  }
  for (std::uint32_t anchor : anchors) {
    std::optional<LoopShape> shape = loopStartingAt(ops, size, anchor, hashes, min_repeats);
    if (!shape) continue;
    // The shortest iteration that holds most of the ops: a block of N iterations with a log line
    // at its end holds them all, but the iteration is one of its N.
    if (!best || shape->period < best->period ||
        (shape->period == best->period && shape->coverage > best->coverage)) {
      best = shape;
    }
  }
  return best;
}

std::vector<std::uint32_t> opsRepeatedAVaryingNumberOfTimes(const std::vector<std::uint32_t>& ops,
                                                            std::size_t max_period,
                                                            std::size_t min_repeats,
                                                            std::size_t min_counts) {
  struct Unit {
    std::vector<std::uint32_t> ops;
    std::vector<std::size_t> counts;  // the distinct repeat counts of its runs
  };
  // Units by their ops in any order: the same unit, entered at another of its ops, is one unit.
  std::unordered_map<std::uint64_t, Unit> units;
  std::vector<bool> covered(ops.size(), false);  // by a run of a shorter unit
  const std::size_t size = ops.size();
  for (std::size_t period = 1; period <= max_period; ++period) {
    std::size_t i = 0;
    while (i + period < size) {
      if (ops[i] != ops[i + period]) {
        ++i;
        continue;
      }
      // ops[i, end + period) repeats ops[i, i + period).
      std::size_t end = i;
      while (end + period < size && ops[end] == ops[end + period]) ++end;
      std::size_t repeats = (end - i + period) / period;
      if (repeats >= min_repeats && !covered[i]) {
        std::uint64_t content = 0;
        std::vector<std::uint32_t> unit(ops.begin() + static_cast<std::ptrdiff_t>(i),
                                        ops.begin() + static_cast<std::ptrdiff_t>(i + period));
        for (std::uint32_t op : unit) content += contentOf(op);
        Unit& seen = units[content + period];
        if (seen.ops.empty()) seen.ops = std::move(unit);
        if (std::find(seen.counts.begin(), seen.counts.end(), repeats) == seen.counts.end()) {
          seen.counts.push_back(repeats);
        }
        std::fill(covered.begin() + static_cast<std::ptrdiff_t>(i),
                  covered.begin() + static_cast<std::ptrdiff_t>(end + period), true);
      }
      i = end + 1;
    }
  }
  std::vector<std::uint32_t> varying;
  for (const auto& [content, unit] : units) {
    if (unit.counts.size() < min_counts) continue;
    for (std::uint32_t op : unit.ops) {
      if (std::find(varying.begin(), varying.end(), op) == varying.end()) varying.push_back(op);
    }
  }
  std::sort(varying.begin(), varying.end());
  return varying;
}

}  // namespace memseal::analyze
