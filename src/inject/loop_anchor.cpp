#include "inject/loop_anchor.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace memseal::inject {

namespace {

void addOnce(std::vector<std::uint32_t>& ops, std::uint32_t op) {
  if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
}

}  // namespace

std::vector<std::uint32_t> usualIterationOps(const std::vector<std::uint32_t>& ops,
                                             std::uint32_t anchor, std::size_t period) {
  std::vector<std::uint32_t> found;
  std::size_t start = ops.size();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] != anchor) continue;
    if (start < i && i - start == period) {
      for (std::size_t j = start; j < i; ++j) addOnce(found, ops[j]);
    }
    start = i;
  }
  return found;
}

// Any op that runs once per iteration could end a step; the one chosen is where the least tensor
// memory is live, between one iteration's last use of its tensors and the next iteration's first
// (after zero_grad freed the gradients, before the forward pass): what the previous iteration did
// last (`total_loss += loss` after optimizer.step()) then belongs to its own step.
void startAtLeastLiveMemory(analyze::LoopShape& loop, const std::vector<std::uint32_t>& ops,
                            const std::vector<std::int64_t>& live, const InnerLoops& inner) {
  if (live.size() != ops.size() || loop.period == 0) return;
  // The usual iterations in the window, newest first (up to 16).
  std::vector<std::size_t> starts;
  for (std::size_t i = ops.size(); i-- > 0 && starts.size() < 16;) {
    if (ops[i] != loop.anchor || i + loop.period > ops.size()) continue;
    std::uint64_t hash = analyze::kEmptyOpsHash;
    for (std::size_t j = 0; j < loop.period; ++j) hash = analyze::foldOp(hash, ops[i + j]);
    if (hash == loop.signature) starts.push_back(i);
  }
  if (starts.empty()) return;
  const std::uint32_t* iteration = ops.data() + starts.front();
  std::unordered_map<std::uint32_t, std::size_t> count;
  for (std::size_t j = 0; j < loop.period; ++j) ++count[iteration[j]];
  std::size_t best = 0;
  std::optional<double> best_live;
  for (std::size_t j = 0; j < loop.period; ++j) {
    if (count[iteration[j]] != 1 || !inner.mayStartIteration(iteration[j])) continue;
    double sum = 0;
    for (std::size_t start : starts) sum += static_cast<double>(live[start + j]);
    double mean = sum / static_cast<double>(starts.size());
    if (!best_live || mean < *best_live) {
      best = j;
      best_live = mean;
    }
  }
  if (best == 0) return;
  std::uint64_t hash = analyze::kEmptyOpsHash;
  for (std::size_t j = 0; j < loop.period; ++j) {
    hash = analyze::foldOp(hash, iteration[(best + j) % loop.period]);
  }
  loop.anchor = iteration[best];
  loop.signature = hash;
}

}  // namespace memseal::inject
