// The newest alive node of a step is what keeps the rest of that step's graph alive: everything
// older in the step hangs off it through next_edges.
#include "detect/graph_nodes.h"

#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <unordered_map>

#include "memseal/tracker.h"
#include "track/hashing.h"

namespace memseal::detect {

void GraphNodeSampler::onGradFn(const track::TensorSignature& output, std::int8_t cuda_device,
                                const track::NodeRef& node, std::uint32_t site) {
  std::uint32_t step = memseal::currentStep();
  if (step < first_step_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (steps_used_ == 0 || steps_[steps_used_ - 1].step != step) {
    if (steps_used_ == steps_.size()) thin();
    steps_[steps_used_] = StepSamples{};
    steps_[steps_used_].step = step;
    ++steps_used_;
  }
  StepSamples& samples = steps_[steps_used_ - 1];
  ++samples.made;
  most_made_ = std::max(most_made_, samples.made);
  if (samples.last_node == node.get()) return;  // an op returning its input's node again
  samples.last_node = node.get();
  for (const torch::autograd::Edge& edge : node->next_edges()) {
    if (edge.function && madeInEarlierStep(edge.function.get(), step)) {
      if (samples.link.address == nullptr) linked_steps_.fetch_add(1, std::memory_order_relaxed);
      samples.link = Sample{node, site, output, cuda_device, node.get()};
      break;
    }
  }
  rememberNode(node.get(), step);
  if (samples.first_count < kFirstSamplesPerStep) {
    samples.first[samples.first_count++] = node;
  }
  Sample& slot = samples.samples[samples.next];
  slot.node = node;
  slot.site = site;
  slot.signature = output;
  slot.cuda_device = cuda_device;
  slot.address = node.get();
  samples.next = (samples.next + 1) % kSamplesPerStep;
  if (samples.count < kSamplesPerStep) ++samples.count;
}

std::size_t GraphNodeSampler::recentBucket(const torch::autograd::Node* node) {
  // Every bit of the address mixed (splitmix64's finaliser). Not Fibonacci hashing: heap addresses
  // differ by regular strides, and two nodes a Fibonacci number of bytes apart (46,368) shared a
  // slot under it.
  std::uint64_t bits =
      track::mixBits(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(node)));
  constexpr std::size_t kBuckets = kRecentNodeSlots / kRecentNodeWays;
  return static_cast<std::size_t>(bits & (kBuckets - 1)) * kRecentNodeWays;
}

void GraphNodeSampler::rememberNode(const torch::autograd::Node* node, std::uint32_t step) {
  RecentNode* bucket = &recent_nodes_[recentBucket(node)];
  RecentNode* slot = bucket;
  for (std::size_t way = 0; way < kRecentNodeWays; ++way) {
    if (bucket[way].address == node || bucket[way].address == nullptr) {
      slot = &bucket[way];
      break;
    }
    if (bucket[way].step < slot->step) slot = &bucket[way];
  }
  *slot = RecentNode{node, step};
}

bool GraphNodeSampler::madeInEarlierStep(const torch::autograd::Node* node,
                                         std::uint32_t step) const {
  const RecentNode* bucket = &recent_nodes_[recentBucket(node)];
  for (std::size_t way = 0; way < kRecentNodeWays; ++way) {
    const RecentNode& recent = bucket[way];
    if (recent.address == node) {
      return recent.step < step && step - recent.step <= kEarlierSteps;
    }
  }
  return false;
}

void GraphNodeSampler::thin() {
  // Bounded memory: with every slot used, drop every other step of the older half, in place.
  std::size_t half = steps_used_ / 2;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < steps_used_; ++i) {
    if (i < half && i % 2 != 0) continue;
    if (kept != i) steps_[kept] = std::move(steps_[i]);
    ++kept;
  }
  for (std::size_t i = kept; i < steps_used_; ++i) steps_[i] = StepSamples{};
  steps_used_ = kept;
}

std::vector<GraphNodeSampler::AliveStep> GraphNodeSampler::aliveSteps(std::uint32_t first,
                                                                      std::uint32_t last,
                                                                      NodeEvidence& evidence,
                                                                      StepOfNode& step_of) {
  std::vector<AliveStep> alive_steps;
  for (std::size_t used = 0; used < steps_used_; ++used) {
    StepSamples& samples = steps_[used];
    if (samples.step < first || samples.step > last) continue;
    evidence.sampled_steps.push_back(samples.step);
    if (samples.dead) continue;
    AliveStep alive;
    alive.samples = &samples;
    for (int i = 0; i < samples.count; ++i) {
      // From oldest to newest.
      int index = (samples.next - samples.count + i + kSamplesPerStep) % kSamplesPerStep;
      const Sample& sample = samples.samples[index];
      if (NodeRef node = sample.node.lock()) {
        step_of.emplace(node.get(), samples.step);
        alive.nodes.emplace_back(&sample, std::move(node));
        ++evidence.alive_samples;
      }
    }
    if (NodeRef link = samples.link.node.lock()) alive.link = std::move(link);
    if (alive.nodes.empty() && !alive.link) {
      // A node that died never comes back: release the step's samples.
      samples.dead = true;
      for (Sample& sample : samples.samples) sample.node.reset();
      for (track::WeakNodeRef& first_node : samples.first) first_node.reset();
      samples.link.node.reset();
      samples.count = 0;
      samples.last_node = nullptr;
      continue;
    }
    alive_steps.push_back(std::move(alive));
  }
  return alive_steps;
}

// What keeps a step's graph alive: its link to an earlier step's graph when one is alive
// (`total_loss += loss`: the add that chains every step's loss to the last), else the newest of
// its nodes that links to an earlier step's sampled node, else its newest node. The link names the
// mistake however the steps are cut.
std::pair<const GraphNodeSampler::Sample*, const GraphNodeSampler::NodeRef*>
GraphNodeSampler::rootOf(const AliveStep& alive, const StepOfNode& step_of) {
  if (alive.link) return {&alive.samples->link, &alive.link};
  for (auto it = alive.nodes.rbegin(); it != alive.nodes.rend(); ++it) {
    for (const torch::autograd::Edge& edge : it->second->next_edges()) {
      auto earlier = step_of.find(edge.function.get());
      if (earlier != step_of.end() && earlier->second < alive.samples->step) {
        return {it->first, &it->second};
      }
    }
  }
  return {alive.nodes.back().first, &alive.nodes.back().second};
}

NodeEvidence GraphNodeSampler::evidence(std::uint32_t first, std::uint32_t last, bool keep_roots) {
  NodeEvidence evidence;
  std::lock_guard<std::mutex> lock(mutex_);
  StepOfNode step_of;
  std::vector<AliveStep> alive_steps = aliveSteps(first, last, evidence, step_of);
  // Every step's root is found before any is used: the nodes of all alive steps are needed to
  // tell a link to an earlier step.
  std::vector<std::pair<const Sample*, const NodeRef*>> roots;
  for (const AliveStep& alive : alive_steps) roots.push_back(rootOf(alive, step_of));
  for (std::size_t i = 0; i < alive_steps.size(); ++i) {
    const AliveStep& alive = alive_steps[i];
    const auto& [root, root_node] = roots[i];
    if (keep_roots) {
      // The root first; then the step's other alive nodes, which the walk also starts from (a kept
      // output's own node, made after the step's boundary, is not behind the step's root).
      evidence.roots.emplace_back(root->site, *root_node);
      for (const auto& [sample, node] : alive.nodes) {
        if (sample != root) evidence.roots.emplace_back(root->site, node);
      }
      for (int index = 0; index < alive.samples->first_count; ++index) {
        if (auto node = alive.samples->first[index].lock()) {
          evidence.roots.emplace_back(root->site, std::move(node));
        }
      }
    }
    NodeGroup& group = evidence.groups_by_root_site[root->site];
    group.steps.push_back(alive.samples->step);
    group.count += 1;
    group.signature = root->signature;
    group.cuda_device = root->cuda_device;
  }
  return evidence;
}

std::int64_t GraphNodeSampler::nodesPerStep() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return most_made_;
}

}  // namespace memseal::detect
