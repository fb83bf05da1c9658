// Parts are grouped by cause: the same category and the same line of the user's code (the first
// frame of the site's stack that is not libtorch's, the runtime's or memseal's). A kept output and
// the activations its graph saved are made under the same line (`outputs.push_back(model(x))`), so
// are a module's parameters (`heads.push_back(Linear(64, 64))`). Without stacks every graph part
// of a category is one cause, and every retained-tensor site its own.
#include "detect/findings.h"
#include "detect/finding_order.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>

#include "analyze/live_view.h"
#include "analyze/retained_graphs.h"
#include "common/text.h"
#include "detect/diagnosis.h"
#include "detect/group_survivors.h"

namespace memseal::detect {

namespace {

struct Candidate {
  LeakPart part;
  LeakCategory category;
  std::string cause;  // the user's line that made it; empty when no stack names one
  bool graph_root = false;
  // A kept tensor whose graph holds another candidate's graph nodes: the root the program keeps.
  bool kept_root = false;
  GroupId group;  // the evidence it comes from
};

// Whether two sites were made within one call of the user's code: the user's frame that called
// the innermost one is the same line for both (the model's forward, called from the same line of
// the loop). Only that nearest caller: every stack of a script ends at the same `main()` line.
bool madeInTheSameCall(const AllocationSite& a, const AllocationSite& b) {
  auto caller = [](const AllocationSite& site) -> std::string {
    bool innermost = true;
    for (const StackFrame& frame : site.frames) {
      if (frame.is_internal || frame.file.empty()) continue;
      if (!innermost) return frame.file + ":" + std::to_string(frame.line);
      innermost = false;
    }
    return "";
  };
  std::string of_a = caller(a);
  return !of_a.empty() && of_a == caller(b);
}

ShapeRange shapeRangeOf(const analyze::ShapeSummary& shapes) {
  ShapeRange range;
  if (shapes.dims < 0 || shapes.distinct.size() <= 1) return range;
  range.min = shapes.minShape();
  range.max = shapes.maxShape();
  range.distinct = static_cast<std::uint32_t>(shapes.distinct.size());
  return range;
}

bool graphCategory(LeakCategory category) {
  return category == LeakCategory::kAutogradGraphRetained ||
         category == LeakCategory::kGradEnabledInference;
}

constexpr std::size_t kMaxGraphNodesWalked = 20000;

Candidate storageCandidate(const StorageEvidence& evidence, const GroupSurvivors& survivors,
                           const LeakEvidence& context) {
  const TensorInfo& example = survivors.example;
  Candidate candidate;
  LeakPart& part = candidate.part;
  double observed = std::max<std::uint32_t>(
      1, evidence.judged_steps > 0 ? evidence.judged_steps : context.observed);
  part.retained = "tensor storage";
  part.site = analyze::describeSite(evidence.key.site);
  part.tensor = example;
  part.shapes = shapeRangeOf(evidence.group.shapes);
  part.bytes_per_step = static_cast<double>(evidence.group.bytes) / observed;
  part.count_per_step = static_cast<double>(evidence.group.count) / observed;
  part.survivors = evidence.group.count;
  part.survivor_bytes = evidence.group.bytes;
  part.steps_with_survivors = static_cast<std::uint32_t>(evidence.group.steps.size());
  part.steps_observed = evidence.judged_steps;
  for (const void* storage : survivors.storages) {
    part.storage_addresses.push_back(reinterpret_cast<std::uintptr_t>(storage));
  }
  candidate.category = categorize(part.tensor, evidence.backward_ran);
  candidate.cause = causeLine(part.site);
  candidate.group = GroupId{false, evidence.key};
  return candidate;
}

Candidate graphCandidate(std::uint32_t root_site, const GraphEvidence& evidence,
                         const LeakEvidence& context) {
  const NodeGroup& group = evidence.group;
  Candidate candidate;
  LeakPart& part = candidate.part;
  // Graphs are sampled on the steps whose ops are watched: rates are per such step.
  double sampled = std::max<std::uint32_t>(
      1, evidence.judged_steps > 0 ? evidence.judged_steps : context.graph_sampled_steps);
  part.retained = "autograd graph nodes";
  part.site = analyze::describeSite(root_site);
  part.tensor = analyze::describeSignature(group.signature);
  if (group.cuda_device >= 0) part.tensor.device = "cuda:" + std::to_string(group.cuda_device);
  part.count_per_step = static_cast<double>(group.count) / sampled;
  part.survivors = group.count;
  part.steps_with_survivors = static_cast<std::uint32_t>(group.steps.size());
  part.steps_observed = evidence.judged_steps;
  candidate.category = evidence.backward_ran ? LeakCategory::kAutogradGraphRetained
                                             : LeakCategory::kGradEnabledInference;
  candidate.cause = causeLine(part.site);
  candidate.graph_root = true;
  candidate.group.graph = true;
  candidate.group.key.site = root_site;
  return candidate;
}

// One finding from the parts of one cause, with the evidence it comes from.
BuiltFinding findingOf(LeakCategory category, std::vector<Candidate> parts,
                       const LeakEvidence& context) {
  // The root first (a kept output's graph), then storage by bytes.
  std::stable_sort(parts.begin(), parts.end(), [](const Candidate& a, const Candidate& b) {
    if (a.graph_root != b.graph_root) return a.graph_root;
    return a.part.bytes_per_step > b.part.bytes_per_step;
  });
  LeakFinding finding;
  finding.category = category;
  const Candidate* root = parts.front().graph_root ? &parts.front() : nullptr;
  std::size_t storage_parts = 0;
  for (const Candidate& candidate : parts) {
    const LeakPart& part = candidate.part;
    if (part.steps_with_survivors >= finding.steps_with_survivors) {
      finding.steps_with_survivors = part.steps_with_survivors;
      finding.steps_observed = part.steps_observed;
    }
    if (candidate.graph_root) continue;
    ++storage_parts;
    finding.bytes_per_step += part.bytes_per_step;
    finding.count_per_step += part.count_per_step;
    finding.survivors += part.survivors;
    finding.survivor_bytes += part.survivor_bytes;
  }
  finding.retained = storage_parts > 0 ? "tensor storage" : "autograd graph nodes";
  if (root != nullptr) finding.resident_bytes_per_step = context.resident_slope;
  if (storage_parts == 0) {
    finding.bytes_per_step = context.resident_slope;
    finding.count_per_step = root->part.count_per_step;
    finding.survivors = root->part.survivors;
  }
  // Where the cause is: the tensor kept with the graph, else the graph's root, else the largest
  // part; its tensor is the example.
  auto kept =
      std::find_if(parts.begin(), parts.end(), [](const Candidate& c) { return c.kept_root; });
  const Candidate& primary = kept != parts.end() ? *kept : root != nullptr ? *root : parts.front();
  finding.site = primary.part.site;
  finding.tensor = primary.part.tensor;
  if (storage_parts == 1) {
    for (const Candidate& candidate : parts) {
      if (!candidate.graph_root) finding.shapes = candidate.part.shapes;
    }
  }
  BuiltFinding built;
  for (Candidate& candidate : parts) {
    built.groups.push_back(candidate.group);
    finding.parts.push_back(std::move(candidate.part));
  }
  built.finding = std::move(finding);
  return built;
}

// Findings of a create_graph cycle's categories become one create-graph-cycle finding when the
// retained graphs reach parameters whose gradients carry history.
void nameCreateGraphCycle(std::vector<BuiltFinding>& findings,
                          const std::vector<analyze::GradHistoryLeaf>& leaves) {
  auto in_cycle = [](const LeakFinding& finding) {
    return graphCategory(finding.category) ||
           finding.category == LeakCategory::kParametersCreatedPerStep;
  };
  if (leaves.empty() || std::none_of(findings.begin(), findings.end(), [](const BuiltFinding& f) {
        return graphCategory(f.finding.category);
      })) {
    return;
  }
  BuiltFinding built_cycle;
  LeakFinding& cycle = built_cycle.finding;
  cycle.category = LeakCategory::kCreateGraphCycle;
  cycle.retained = "tensor storage";
  std::vector<BuiltFinding> rest;
  bool first = true;
  for (BuiltFinding& built : findings) {
    LeakFinding& finding = built.finding;
    if (!in_cycle(finding)) {
      rest.push_back(std::move(built));
      continue;
    }
    built_cycle.groups.insert(built_cycle.groups.end(), built.groups.begin(), built.groups.end());
    if (first) {
      cycle.site = finding.site;
      cycle.retained = finding.retained;
      first = false;
    }
    cycle.bytes_per_step += finding.bytes_per_step;
    cycle.count_per_step += finding.count_per_step;
    cycle.survivors += finding.survivors;
    cycle.survivor_bytes += finding.survivor_bytes;
    if (finding.steps_with_survivors >= cycle.steps_with_survivors) {
      cycle.steps_with_survivors = finding.steps_with_survivors;
      cycle.steps_observed = finding.steps_observed;
    }
    for (LeakPart& part : finding.parts) cycle.parts.push_back(std::move(part));
  }
  cycle.tensor = leaves.front().tensor;
  LeakFinding named = cycle;
  named.tensor.grad_fn = leaves.front().grad_fn;  // of the parameter's .grad, for the hint
  cycle.hint = hintFor(named);
  std::string parameters;
  for (std::size_t i = 0; i < leaves.size() && i < 4; ++i) {
    parameters += (i ? ", " : "") + std::string("[");
    for (std::size_t d = 0; d < leaves[i].tensor.shape.size(); ++d) {
      parameters += (d ? ", " : "") + std::to_string(leaves[i].tensor.shape[d]);
    }
    parameters += "]";
  }
  cycle.hint += " Parameters whose .grad has history: " + parameters +
                (leaves.size() > 4 ? ", ..." : "") + ".";
  rest.push_back(std::move(built_cycle));
  findings.swap(rest);
}

}  // namespace

std::string causeLine(const AllocationSite& site) {
  for (const StackFrame& frame : site.frames) {
    if (frame.is_internal) continue;
    if (!frame.file.empty()) return frame.file + ":" + std::to_string(frame.line);
    return frame.function.empty() ? common::hexAddress(frame.address) : frame.function;
  }
  return "";
}

bool isGraphFinding(const LeakFinding& finding) {
  return graphCategory(finding.category) || finding.category == LeakCategory::kCreateGraphCycle;
}

std::vector<LeakFinding> buildFindings(const LeakEvidence& evidence) {
  std::vector<LeakFinding> findings;
  for (BuiltFinding& built : buildFindingsWithGroups(evidence)) {
    findings.push_back(std::move(built.finding));
  }
  return findings;
}

namespace {

// Kept tensors with history whose graphs hold the nodes a graph candidate's steps left alive (a
// loss kept in a list, its graph cut by a step boundary inside the forward pass, so that the nodes'
// newest was made on another line than the loss, or in a program whose frames name no line): the
// kept tensor is those graphs' root, and its cause theirs. Not a tensor the graphs saved (an
// activation has history too, and its graph is below the nodes' own), and each graph candidate
// joins the first root that holds it.
void joinGraphsToTheirKeptRoots(std::vector<Candidate>& storage_candidates,
                                const std::vector<const GroupSurvivors*>& groups,
                                std::vector<Candidate>& graph_candidates,
                                const analyze::RetainedGraphs& graphs,
                                const LeakEvidence& evidence) {
  std::map<std::uint32_t, std::size_t> graph_of_site;  // one graph candidate per root site
  for (std::size_t g = 0; g < graph_candidates.size(); ++g) {
    graph_of_site.emplace(graph_candidates[g].part.site.id, g);
  }
  std::vector<bool> joined(graph_candidates.size(), false);
  for (std::size_t i = 0; i < storage_candidates.size(); ++i) {
    Candidate& kept = storage_candidates[i];
    if (!graphCategory(kept.category) || groups[i]->kept_graphs.empty() ||
        heldByGraphs(*groups[i], graphs)) {
      continue;
    }
    std::unordered_set<const torch::autograd::Node*> held =
        analyze::nodesReachedFrom(groups[i]->kept_graphs, kMaxGraphNodesWalked);
    for (std::size_t r = 0; r < evidence.alive_roots.size(); ++r) {
      auto graph = graph_of_site.find(evidence.alive_root_sites[r]);
      if (graph == graph_of_site.end() || joined[graph->second] ||
          held.count(evidence.alive_roots[r].get()) == 0) {
        continue;
      }
      graph_candidates[graph->second].cause = kept.cause;
      graph_candidates[graph->second].category = kept.category;
      kept.kept_root = true;
      joined[graph->second] = true;
    }
  }
}

// Tensor storage that the retained graphs explain joins their cause: a kept tensor of a line whose
// graphs are retained, a tensor the graphs saved for backward, another layer's output made in the
// same call as the graph's root.
std::vector<Candidate> storageCandidates(const LeakEvidence& evidence,
                                         std::vector<Candidate>& graph_candidates,
                                         const analyze::RetainedGraphs& graphs) {
  std::map<analyze::SurvivorKey, GroupSurvivors> survivors =
      groupSurvivors(evidence.storage, evidence.first_step, evidence.last_step);
  std::vector<Candidate> candidates;
  std::vector<const GroupSurvivors*> groups;
  for (const StorageEvidence& storage : evidence.storage) {
    groups.push_back(&survivors[storage.key]);
    candidates.push_back(storageCandidate(storage, *groups.back(), evidence));
  }
  joinGraphsToTheirKeptRoots(candidates, groups, graph_candidates, graphs, evidence);
  // The lines whose graphs are retained: what else those lines retain, and what the graphs saved
  // for their backward (an input of the forward pass), belongs to the same cause.
  std::set<std::string> graph_lines;
  for (const Candidate& candidate : graph_candidates) {
    if (!candidate.cause.empty()) graph_lines.insert(candidate.cause);
  }
  const Candidate* first_graph = graph_candidates.empty() ? nullptr : &graph_candidates.front();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const GroupSurvivors& group = *groups[i];
    Candidate& candidate = candidates[i];
    if (candidate.kept_root) continue;  // its graph's cause is its own
    if (first_graph != nullptr && candidate.category == LeakCategory::kTensorsRetained &&
        graph_lines.count(candidate.cause) != 0) {
      candidate.category = first_graph->category;
    } else if (first_graph != nullptr && graph_lines.count(candidate.cause) == 0 &&
               heldByGraphs(group, graphs)) {
      // Saved by the retained graphs for their backward (an activation of any layer, the input
      // of the forward pass): part of what the kept root holds, whatever its own history.
      candidate.category = first_graph->category;
      candidate.cause = first_graph->cause;
    } else if (first_graph != nullptr && candidate.category == first_graph->category &&
               graph_lines.count(candidate.cause) == 0 &&
               madeInTheSameCall(candidate.part.site, first_graph->part.site)) {
      // A tensor with history made in the same call of the user's code as the retained graph's
      // root (another layer of the model whose output is kept): that graph's activation, even
      // where its node type does not say what it saved.
      candidate.cause = first_graph->cause;
    }
  }
  return candidates;
}

// One finding per cause. Retained tensors without a user line are each their own cause.
std::vector<BuiltFinding> findingsByCause(std::vector<Candidate> candidates,
                                          const LeakEvidence& evidence) {
  std::map<std::tuple<int, std::string, std::uint32_t>, std::vector<Candidate>> causes;
  for (Candidate& candidate : candidates) {
    std::uint32_t apart =
        candidate.category == LeakCategory::kTensorsRetained && candidate.cause.empty()
            ? candidate.part.site.id
            : 0;
    causes[{static_cast<int>(candidate.category), candidate.cause, apart}].push_back(
        std::move(candidate));
  }
  std::vector<BuiltFinding> findings;
  for (auto& [cause, parts] : causes) {
    findings.push_back(
        findingOf(static_cast<LeakCategory>(std::get<0>(cause)), std::move(parts), evidence));
  }
  for (BuiltFinding& built : findings) built.finding.hint = hintFor(built.finding);
  return findings;
}

// Tracked memory that grows while no single site retains in most steps: the sites holding most of
// it, as one finding.
BuiltFinding unexplainedGrowthFinding(const LeakEvidence& evidence) {
  std::map<analyze::SurvivorKey, GroupSurvivors> contributors =
      groupSurvivors(evidence.growth_contributors, evidence.first_step, evidence.last_step);
  std::vector<Candidate> parts;
  for (const StorageEvidence& storage : evidence.growth_contributors) {
    parts.push_back(storageCandidate(storage, contributors[storage.key], evidence));
  }
  LeakCategory category = parts.front().category;
  BuiltFinding built = findingOf(category, std::move(parts), evidence);
  LeakFinding& finding = built.finding;
  finding.bytes_per_step = evidence.unexplained_tensor_growth;
  finding.hint = "Tracked tensor memory grows steadily (+" +
                 common::bytesText(static_cast<std::int64_t>(finding.bytes_per_step)) +
                 "/step) without levelling off, but no single site retains tensors in most "
                 "steps: the " +
                 std::to_string(finding.parts.size()) +
                 " sites listed hold most of what was kept after warm-up. " + hintFor(finding);
  return built;
}

// Tracked growth that no single site explains, held mostly in tensors the retained graphs saved for
// their backward, or in tensors with autograd history of their own (outputs kept with their graphs,
// attributed to more than one site): the retained graphs' cause, not one of its own. (Steps cut
// finer than the program's iterations see a kept graph's saved input once every few steps, in no
// site most steps.)
bool growthHeldByGraphs(const LeakEvidence& evidence, const analyze::RetainedGraphs& graphs) {
  std::map<analyze::SurvivorKey, GroupSurvivors> contributors =
      groupSurvivors(evidence.growth_contributors, evidence.first_step, evidence.last_step);
  std::int64_t held = 0;
  std::int64_t total = 0;
  for (const StorageEvidence& storage : evidence.growth_contributors) {
    total += storage.group.bytes;
    if (withAutogradHistory(storage) || heldByGraphs(contributors[storage.key], graphs)) {
      held += storage.group.bytes;
    }
  }
  return total > 0 && held * 2 >= total;
}

BuiltFinding untrackedGrowthFinding(const LeakEvidence& evidence) {
  LeakFinding finding;
  finding.category = LeakCategory::kUntrackedGrowth;
  finding.retained = evidence.private_memory ? "private memory" : "resident memory";
  finding.bytes_per_step = evidence.untracked_growth;
  finding.explained_bytes_per_step = evidence.explained_growth;
  finding.steps_with_survivors = evidence.observed;
  finding.steps_observed = evidence.observed;
  finding.site.op = "<outside tensor storage>";
  finding.hint = hintFor(finding);
  return BuiltFinding{std::move(finding), {}};
}

}  // namespace

std::vector<BuiltFinding> buildFindingsWithGroups(const LeakEvidence& evidence) {
  analyze::RetainedGraphs graphs =
      analyze::inspectRetainedGraphs(evidence.alive_roots, kMaxGraphNodesWalked);
  std::vector<Candidate> candidates;
  for (const auto& [site, graph] : evidence.graph_roots) {
    candidates.push_back(graphCandidate(site, graph, evidence));
  }
  for (Candidate& candidate : storageCandidates(evidence, candidates, graphs)) {
    candidates.push_back(std::move(candidate));
  }
  std::vector<BuiltFinding> findings = findingsByCause(std::move(candidates), evidence);
  nameCreateGraphCycle(findings, graphs.leaves_with_grad_history);
  bool graph_retained = std::any_of(findings.begin(), findings.end(), [](const BuiltFinding& b) {
    return isGraphFinding(b.finding);
  });
  if (evidence.unexplained_tensor_growth > 0 && !evidence.growth_contributors.empty() &&
      !(graph_retained && growthHeldByGraphs(evidence, graphs))) {
    findings.push_back(unexplainedGrowthFinding(evidence));
  }
  for (BuiltFinding& built : findings) {
    LeakFinding& finding = built.finding;
    if (graph_retained && finding.category == LeakCategory::kTensorsRetained) {
      finding.hint +=
          " It may also be an input saved by the autograd graph retained above "
          "(a graph keeps the inputs its backward needs): fix that finding first.";
    }
  }
  if (evidence.untracked_growth > 0) findings.push_back(untrackedGrowthFinding(evidence));
  // Costliest first; resident growth last, as the weakest evidence (it names no site).
  std::stable_sort(findings.begin(), findings.end(),
                   [](const BuiltFinding& a, const BuiltFinding& b) {
                     return reportedBefore(a.finding, b.finding);
                   });
  return findings;
}

void dropGrowthOfGraphsBroughtBack(const LeakEvidence& evidence,
                                   std::vector<LeakFinding>& findings) {
  if (!evidence.storage.empty() || !evidence.graph_roots.empty()) return;
  // A graph finding of either kind: graphs the sampler saw kept, or tensors with autograd history
  // (a list of losses) whose graphs are what grows.
  auto kept_most_steps = std::find_if(findings.begin(), findings.end(), [](const LeakFinding& f) {
    return isGraphFinding(f) && !keptInFewSteps(f);
  });
  if (kept_most_steps == findings.end()) return;
  const TensorInfo kept = kept_most_steps->tensor;
  bool judged_alone = evidence.unexplained_tensor_growth <= 0;
  double cost = graphNodesCostPerStep(evidence.nodes_per_step);
  findings.erase(std::remove_if(findings.begin(), findings.end(),
                                [&](const LeakFinding& f) {
                                  if (f.category == LeakCategory::kUntrackedGrowth) {
                                    return judged_alone &&
                                           !untrackedBeyondOtherFindings(f.bytes_per_step, cost);
                                  }
                                  // Growth spread over sites in tensors like the kept ones (an
                                  // output's storage seen made by two ops): judged while those were
                                  // gone, it is theirs.
                                  return isGraphFinding(f) && keptInFewSteps(f) &&
                                         !kept.grad_fn.empty() &&
                                         f.tensor.grad_fn == kept.grad_fn &&
                                         f.tensor.dtype == kept.dtype;
                                }),
                 findings.end());
}

}  // namespace memseal::detect
