// Autograd graphs that outlive their step: the newest nodes made in each step after warm-up are
// sampled through weak references; a step whose newest surviving node is still alive later keeps
// (part of) its graph alive. A node whose inputs include a node of an earlier step (the add of
// `total_loss += loss`, which chains every step's graph to the last) is kept apart as the step's
// link: it names the mistake wherever the step boundary falls, however many nodes come after it.
// Memory: a fixed ring of samples per step, for a bounded number of steps (older steps are
// thinned), released as soon as a step's samples have all died.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "track/grad_fn_observer.h"
#include "track/live_record.h"

namespace memseal::detect {

struct NodeGroup {
  std::vector<std::uint32_t> steps;  // steps whose root node was made at this site
  std::int64_t count = 0;
  track::TensorSignature signature;  // of the newest root's output
  std::int8_t cuda_device = -1;      // its CUDA device, -1 for the CPU
};

struct NodeEvidence {
  std::map<std::uint32_t, NodeGroup> groups_by_root_site;
  // The alive sampled nodes of each step, its root first, by the site of the step's root, when
  // asked for (they are then kept alive by this).
  std::vector<std::pair<std::uint32_t, track::NodeRef>> roots;  // site
  std::vector<std::uint32_t> sampled_steps;  // steps in the range that had samples, sorted
  std::int64_t alive_samples = 0;
};

class GraphNodeSampler final : public track::GradFnObserver {
 public:
  // Nodes made before `first_step` (warm-up) are not sampled.
  explicit GraphNodeSampler(std::uint32_t first_step) : first_step_(first_step) {}

  void onGradFn(const track::TensorSignature& output, std::int8_t cuda_device,
                const track::NodeRef& node, std::uint32_t site) override;

  // The steps in [first, last] (all completed) grouped by the site of their newest surviving node;
  // with `keep_roots`, those nodes too.
  NodeEvidence evidence(std::uint32_t first, std::uint32_t last, bool keep_roots = false);
  // The most nodes made in one sampled step: what one retained step's graph holds at least.
  std::int64_t nodesPerStep() const;
  // Steps so far whose graph linked to an earlier step's (`total_loss += loss`). Read without the
  // lock at a step boundary: a changed count says graphs chain across steps though tensor storage
  // may look alike from one boundary to the next.
  std::uint64_t linkedSteps() const { return linked_steps_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kSamplesPerStep = 16;
  // The first nodes of a step, too: where the step boundary falls inside the forward pass, they
  // are the end of the previous iteration's forward (its head, its output's node), and only a walk
  // from them reaches what those nodes saved.
  static constexpr int kFirstSamplesPerStep = 16;
  static constexpr std::size_t kMaxSteps = 512;

  struct Sample {
    track::WeakNodeRef node;
    std::uint32_t site = 0;
    track::TensorSignature signature;
    std::int8_t cuda_device = -1;
    // The node's address, compared only (see recent_nodes_): never locked on the op's thread, where
    // dropping the last reference would destroy a graph under the sampler's lock.
    const torch::autograd::Node* address = nullptr;
  };
  struct StepSamples {
    std::uint32_t step = 0;
    // The newest samples of the step, in creation order (a ring: `next` is the oldest once full).
    Sample samples[kSamplesPerStep];
    int count = 0;
    int next = 0;
    // The newest node of the step made from a node of an earlier step (empty: none).
    Sample link;
    // Its first nodes, walked from and never judged: only the references, since every step
    // keeps its samples until thinned.
    track::WeakNodeRef first[kFirstSamplesPerStep];
    int first_count = 0;
    std::int64_t made = 0;  // nodes made in the step, sampled or not
    bool dead = false;      // every sample died: never alive again, samples released
    const torch::autograd::Node* last_node = nullptr;
  };
  // A step's alive samples, held while they are looked at, old to new, and its link to an earlier
  // step's graph.
  using NodeRef = track::NodeRef;
  struct AliveStep {
    StepSamples* samples = nullptr;
    std::vector<std::pair<const Sample*, NodeRef>> nodes;
    NodeRef link;
  };
  using StepOfNode = std::unordered_map<const torch::autograd::Node*, std::uint32_t>;
  // With mutex_ held: the steps of [first, last] whose samples are alive (a step whose samples all
  // died is released), which step made each alive node; every sampled step goes into `evidence`.
  std::vector<AliveStep> aliveSteps(std::uint32_t first, std::uint32_t last, NodeEvidence& evidence,
                                    StepOfNode& step_of);
  // What keeps the step's graph alive (see evidence()): its root sample and node.
  static std::pair<const Sample*, const NodeRef*> rootOf(const AliveStep& alive,
                                                         const StepOfNode& step_of);
  void thin();  // with mutex_ held and every slot used
  // Every node made in the last kEarlierSteps steps, by address, in a table made with the sampler:
  // a node whose inputs include one of them links its step to an earlier one. All nodes, not the
  // samples only: the add of `total_loss += loss` comes anywhere in a step (a GAN's generator
  // update makes dozens of nodes after it), and a link is seen only where the node it follows is
  // known. Each address has a bucket of kRecentNodeWays slots, where a new node takes the slot of
  // the oldest step: a node is forgotten only once that many newer ones shared its bucket (the
  // next step's link then finds the chain again). A freed node's address reused by a node no op
  // reported may at worst take an ordinary node for a link, which matters only if it stays alive.
  struct RecentNode {
    const torch::autograd::Node* address = nullptr;
    std::uint32_t step = 0;
  };
  static constexpr std::size_t kRecentNodeSlots = std::size_t{1} << 14;
  static constexpr std::size_t kRecentNodeWays = 2;
  static constexpr std::uint32_t kEarlierSteps = 8;
  // The first slot of the node's bucket.
  static std::size_t recentBucket(const torch::autograd::Node* node);
  void rememberNode(const torch::autograd::Node* node, std::uint32_t step);
  // With mutex_ held: whether `node` was made in one of the kEarlierSteps steps before `step`.
  bool madeInEarlierStep(const torch::autograd::Node* node, std::uint32_t step) const;
  std::vector<RecentNode> recent_nodes_ = std::vector<RecentNode>(kRecentNodeSlots);

  std::uint32_t first_step_;
  std::int64_t most_made_ = 0;  // the most nodes made in one step so far
  std::atomic<std::uint64_t> linked_steps_{0};
  mutable std::mutex mutex_;
  // The sampled steps, oldest first, in slots made with the sampler: their memory is resident from
  // the start, so filling them over the first kMaxSteps steps is no growth of the program's (a
  // deque that grew here read as 2 KiB a step of untracked growth in a healthy 600-step run), and
  // a new step allocates nothing.
  std::vector<StepSamples> steps_ = std::vector<StepSamples>(kMaxSteps);
  std::size_t steps_used_ = 0;
};

}  // namespace memseal::detect
