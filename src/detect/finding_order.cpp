#include "detect/finding_order.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "detect/findings.h"

namespace memseal::detect {

bool keptInFewSteps(const LeakFinding& finding) {
  return finding.retained == "tensor storage" && finding.steps_observed > 0 &&
         std::uint64_t{finding.steps_with_survivors} * 2 < finding.steps_observed;
}

double costAtPeak(const LeakFinding& finding) {
  double now = finding.survivor_bytes > 0
                   ? static_cast<double>(finding.survivor_bytes)
                   : finding.bytes_per_step * static_cast<double>(finding.steps_observed);
  // Kept graphs cost resident memory beyond their few bytes of storage.
  now =
      std::max(now, finding.resident_bytes_per_step * static_cast<double>(finding.steps_observed));
  if (finding.freed) now = std::max(now, static_cast<double>(finding.freed->peak_bytes));
  return now;
}

bool reportedBefore(const LeakFinding& a, const LeakFinding& b) {
  bool a_untracked = a.category == LeakCategory::kUntrackedGrowth;
  bool b_untracked = b.category == LeakCategory::kUntrackedGrowth;
  if (a_untracked != b_untracked) return b_untracked;
  double a_cost = costAtPeak(a);
  double b_cost = costAtPeak(b);
  if (a_cost != b_cost) return a_cost > b_cost;
  return a.bytes_per_step > b.bytes_per_step;
}

bool chargeHeldFreeToKeptGraphs(std::int64_t held_free_bytes, std::uint32_t steps,
                                std::vector<LeakFinding>& findings) {
  LeakFinding* costliest = nullptr;
  for (LeakFinding& finding : findings) {
    if (!isGraphFinding(finding) || finding.steps_observed == 0) continue;
    if (finding.freed && !finding.freed->building_up) continue;  // its graphs are gone
    if (costliest == nullptr || costAtPeak(finding) > costAtPeak(*costliest)) costliest = &finding;
  }
  if (costliest == nullptr) return false;
  if (held_free_bytes > 0 && steps > 0) {
    costliest->resident_bytes_per_step +=
        static_cast<double>(held_free_bytes) / static_cast<double>(steps);
  }
  return true;
}

void orderFindings(std::vector<LeakFinding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), reportedBefore);
  auto last_graph = std::find_if(findings.rbegin(), findings.rend(), isGraphFinding);
  if (last_graph == findings.rend()) return;
  // Tensors kept now and then beside a graph kept every step are most likely what the graph saved
  // for its backward (one input an iteration where steps are cut finer than the program's
  // iterations), which its walk may not reach on a long chain: after the graphs, whatever their
  // bytes (a graph's are the resident memory it costs, which can read 0 on a short run).
  auto graphs_end = last_graph.base();
  std::vector<LeakFinding> ordered;
  std::vector<LeakFinding> after_graphs;
  for (auto it = findings.begin(); it != graphs_end; ++it) {
    (keptInFewSteps(*it) ? after_graphs : ordered).push_back(std::move(*it));
  }
  for (LeakFinding& finding : after_graphs) ordered.push_back(std::move(finding));
  for (auto it = graphs_end; it != findings.end(); ++it) ordered.push_back(std::move(*it));
  findings.swap(ordered);
}

}  // namespace memseal::detect
