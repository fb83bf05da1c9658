// Memory a cause keeps for a while and then frees at once: a running total with its autograd
// history reset every N steps, a list that is a local of train() and goes when train() returns,
// predictions gathered over an epoch. A step boundary's census shows such memory only while it is
// held. This remembers, for each group of survivors (a storage group, or the root site of retained
// graphs), where its current build-up started and the most it held, and notices the boundary at
// which a build-up was freed together: a collapse. A bounded cache gives its memory back a little
// at a time instead (its oldest survivors go while newer ones stay): its build-up is dropped
// without a trace. After a collapse the group is judged again from the step after it, so the next
// build-up of a sawtooth is found on its own. Pure: no libtorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analyze/survivors.h"

namespace memseal::detect {

// The median of lengths counted by value, such as a cause's build-ups by their number of steps
// (the mean of the two middle ones for an even count).
double medianLength(const std::map<std::uint32_t, std::uint32_t>& counted_lengths);

struct GroupId {
  bool graph = false;        // autograd graphs by the site of their root, else tensor storage
  analyze::SurvivorKey key;  // graphs: key.site only
  bool operator<(const GroupId& other) const {
    if (graph != other.graph) return graph < other.graph;
    return key < other.key;
  }
  bool operator==(const GroupId& other) const { return graph == other.graph && key == other.key; }
};

// One group as a step boundary sees it.
struct GroupAtBoundary {
  GroupId id;
  // Distinct steps with survivors, sorted (all of them, also those before the group's segment).
  const std::vector<std::uint32_t>* steps = nullptr;
  std::int64_t bytes = 0;  // tensor storage the group holds now (0 for graphs)
  bool grows = false;      // judged growing within its segment
  // Steps it was judged over: those of its phases in its segment (for graphs, the watched ones).
  std::uint32_t judged_steps = 0;
};

// A build-up that was freed together.
struct Collapse {
  GroupId id;
  std::uint32_t first_step = 0;    // the oldest step whose survivors the build-up held
  std::uint32_t last_step = 0;     // the newest
  std::uint32_t freed_by = 0;      // the boundary's step (the one now running) that found it freed
  std::uint32_t judged_steps = 0;  // its length, in steps of its phases
  std::uint32_t detected_at = 0;   // the step after which it was first judged growing
  std::int64_t peak_bytes = 0;
  // The group's segmentStart when the build-up was found freed (before update() began the next
  // segment): past 0, a build-up of the group was freed before this one.
  std::uint32_t segment_start = 0;
};

class RetentionHistory {
 public:
  // Shorter build-ups are not kept as findings when they are freed: a few steps' survivors freed
  // together are ordinary (a loss summed over a few micro-batches before one backward).
  static constexpr std::uint32_t kMinBuildUpSteps = 8;

  // Survivors of steps before this belong to build-ups already freed (0: none yet).
  std::uint32_t segmentStart(const GroupId& id) const;

  // At a boundary where every group was judged (`current_step` is the step now running): the
  // build-ups that collapsed since the last such boundary. A build-up collapses when at most a
  // quarter of the steps it held still have survivors.
  std::vector<Collapse> update(const std::vector<GroupAtBoundary>& groups,
                               std::uint32_t current_step);
  // What update() would find collapsed, without changing anything (a report between boundaries:
  // at exit, after the program freed what its loop held).
  std::vector<Collapse> collapsedSince(const std::vector<GroupAtBoundary>& groups,
                                       std::uint32_t current_step) const;

  // Whether a group is building up (judged growing at the last update, or falling: half of its
  // build-up or more freed since the update before, the rest perhaps at the next), and how long
  // it has been.
  bool buildingUp(const GroupId& id) const { return building_.count(id) != 0; }
  // Whether a build-up is falling: the next update is to be made, to tell whether it was freed
  // together.
  bool anyFalling() const;
  std::uint32_t buildUpSteps(const GroupId& id) const;

  // A group of tensor storage that turns over: survivors it held at one update were freed by a
  // later one (an evicting cache, a bounded queue), and since then the number of steps it holds
  // survivors of has stopped rising, or that of all groups that evict has stayed flat (one cache's
  // entries fall into several groups when the sites of some steps' allocations are known in more
  // detail than others', and then one group's share of a full cache can rise). Replacing old
  // survivors with new ones is not growth, however slowly the entries are replaced; a container
  // that evicts some entries but keeps gaining more still grows. Judged once evictions have been
  // seen over kMinTurnoverSteps steps.
  bool turnsOver(const GroupId& id) const;
  // The most tensor storage the groups that turn over held: the allocator fragmentation that
  // replacing entries of ever-new sizes causes is bounded by it.
  std::int64_t turnoverPeakBytes() const { return turnover_peak_bytes_; }
  static constexpr std::uint32_t kMinTurnoverSteps = 4 * kMinBuildUpSteps;
  static constexpr std::size_t kMinTurnoverSamples = 8;  // updates since the first eviction

 private:
  struct BuildUp {
    std::uint32_t oldest = 0;
    std::uint32_t newest = 0;
    std::uint32_t alive_steps = 0;  // of the steps in [oldest, newest]
    std::uint32_t judged_steps = 0;
    std::uint32_t detected_at = 0;
    std::int64_t peak_bytes = 0;
    // Half of it or more was freed at the last update, not the rest: a step boundary taken on
    // another thread (time windows) can come while the program frees a list of what it kept,
    // and the next update tells whether it was freed together. Kept for one update.
    bool falling = false;
  };
  // How many of `build`'s steps `group` (null: no survivors at all) still holds survivors of.
  static std::uint32_t stillHeld(const BuildUp& build, const GroupAtBoundary* group);
  // A collapse of `build`, when `group` no longer holds its steps (a quarter of them at most).
  static bool collapsed(const BuildUp& build, const GroupAtBoundary* group);

  static constexpr std::size_t kMaxTurnoverSamples = 128;
  // The steps held at updates: one update in `stride` kept, the stride doubling (and every other
  // sample kept) when kMaxTurnoverSamples are reached, so the kept ones stay evenly spaced; the
  // newest is always judged too.
  struct CountSeries {
    std::vector<std::uint32_t> steps;
    std::vector<std::int64_t> counts;
    std::size_t stride = 1;
    std::size_t since_kept = 0;
    std::uint32_t newest_step = 0;
    std::int64_t newest_count = 0;
    void add(std::uint32_t step, std::int64_t count);
    // The later half of the samples from `first_step` on (at least 8), the newest included.
    void since(std::uint32_t first_step, std::vector<std::uint32_t>* steps_out,
               std::vector<std::int64_t>* counts_out) const;
    // How many samples from `first_step` on, the newest included.
    std::size_t countSince(std::uint32_t first_step) const;
    // Whether the counts from `first_step` on keep rising (steadyTensorGrowthPerStep).
    bool grows(std::uint32_t first_step) const;
    // Whether they are flat: at least 8 samples, the last quarter's maximum no higher than the
    // first quarter's.
    bool flat(std::uint32_t first_step) const;
  };
  struct Turnover {
    std::uint32_t last_update = 0;     // the step running at the last update that saw the group
    std::uint32_t alive_then = 0;      // the steps it held survivors of then (in its segment)
    std::uint32_t first_eviction = 0;  // the update that first found some of them freed (0: none)
    CountSeries held;                  // since the first eviction: the steps it holds survivors of
    std::int64_t peak_bytes = 0;
    bool turns_over = false;  // judged at the last update
  };
  void followTurnover(const std::vector<GroupAtBoundary>& groups, std::uint32_t current_step);
  bool judgeTurnover(const Turnover& turnover) const;

  std::map<GroupId, BuildUp> building_;
  std::map<GroupId, std::uint32_t> segment_start_;
  std::map<GroupId, Turnover> turnover_;
  CountSeries evicting_held_;             // of all groups that have evicted, together
  std::int64_t turnover_peak_bytes_ = 0;  // of the groups that turn over, at the last update
};

}  // namespace memseal::detect
