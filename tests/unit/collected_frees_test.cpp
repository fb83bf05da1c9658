// What Python's cyclic garbage collector frees (track/collected_frees.h), and how a build-up that
// was freed is told to be the collector's doing or the program's (detect/held_causes.h). The
// collector is simulated: a gc callback only marks the collecting thread, as setCollectionRunning
// does here.
#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "detect/held_causes.h"
#include "memseal/tracker.h"
#include "track/collected_frees.h"

namespace memseal {
namespace {

TrackerOptions quietOptions() {
  TrackerOptions options;
  options.stacks = StackMode::kOff;
  options.watch_ops = OpWatching::off();
  return options;
}

// Steps `first`..`last` each keep one tensor of `bytes`.
std::vector<at::Tensor> keepOnePerStep(std::uint32_t first, std::uint32_t last,
                                       std::int64_t bytes) {
  std::vector<at::Tensor> kept;
  for (std::uint32_t step = first; step <= last; ++step) {
    setStep(step);
    kept.push_back(at::empty({bytes}, at::kByte));
  }
  return kept;
}

track::CollectedFreesQuery allSitesOf(std::uint32_t first, std::uint32_t last) {
  track::CollectedFreesQuery query;
  query.first_allocated = first;
  query.last_allocated = last;
  query.first_freed = 0;
  query.last_freed = 1000;
  return query;
}

TEST(CollectedFrees, FreesDuringACollectionAreTheCollectorsAndOthersAreNot) {
  Tracker tracker(quietOptions());
  tracker.start();
  std::vector<at::Tensor> by_program = keepOnePerStep(1, 10, 256);
  std::vector<at::Tensor> by_collector = keepOnePerStep(11, 20, 512);
  setStep(21);
  by_program.clear();  // the program's own free: not the collector's
  track::setCollectionRunning(true);
  by_collector.clear();
  track::setCollectionRunning(false);
  track::CollectedFrees program = track::collectedFrees(allSitesOf(1, 10));
  EXPECT_EQ(program.allocations, 0u);
  track::CollectedFrees collected = track::collectedFrees(allSitesOf(11, 20));
  EXPECT_EQ(collected.allocations, 10u);
  EXPECT_EQ(collected.bytes, 10 * 512);
  EXPECT_EQ(collected.allocation_steps, 10u);
  // Freed at step 21: a window that ends before it selects none of them.
  track::CollectedFreesQuery earlier = allSitesOf(11, 20);
  earlier.last_freed = 20;
  EXPECT_EQ(track::collectedFrees(earlier).allocations, 0u);
  tracker.stop();
}

TEST(CollectedFrees, ACollectionOnAnotherThreadDoesNotMakeThisThreadsFreesTheCollectors) {
  Tracker tracker(quietOptions());
  tracker.start();
  std::vector<at::Tensor> kept = keepOnePerStep(1, 8, 128);
  std::thread collector([] { track::setCollectionRunning(true); });
  collector.join();
  setStep(9);
  kept.clear();
  EXPECT_EQ(track::collectedFrees(allSitesOf(1, 8)).allocations, 0u);
  tracker.stop();
}

TEST(CollectedFrees, WhatAnEarlierSessionsCollectorFreedIsNotThisSessions) {
  {
    Tracker earlier(quietOptions());
    earlier.start();
    std::vector<at::Tensor> kept = keepOnePerStep(1, 8, 128);
    track::setCollectionRunning(true);
    kept.clear();
    track::setCollectionRunning(false);
    earlier.stop();
  }
  Tracker tracker(quietOptions());
  tracker.start();
  EXPECT_EQ(track::collectedFrees(allSitesOf(1, 8)).allocations, 0u);
  tracker.stop();
}

detect::Collapse collapseOf(bool graph, std::uint32_t first, std::uint32_t last,
                            std::int64_t peak_bytes) {
  detect::Collapse collapse;
  collapse.id.graph = graph;
  collapse.id.key.site = 42;
  collapse.first_step = first;
  collapse.last_step = last;
  collapse.freed_by = last + 5;
  collapse.peak_bytes = peak_bytes;
  return collapse;
}

TEST(HeldCauses, ABuildUpOfStorageIsTheCollectorsWhenItFreedHalfOfItsPeakFromItsSite) {
  detect::Collapse storage = collapseOf(false, 10, 49, 40 * 1024);
  track::CollectedFreesQuery query = detect::collectorQuery(storage);
  ASSERT_TRUE(query.site.has_value());
  EXPECT_EQ(*query.site, 42u);
  EXPECT_EQ(query.first_allocated, 10u);
  EXPECT_EQ(query.last_allocated, 49u);
  EXPECT_EQ(query.first_freed, 49u);
  EXPECT_EQ(query.last_freed, 54u);
  track::CollectedFrees half{20 * 1024, 20, 20};
  track::CollectedFrees little{4 * 1024, 4, 4};
  EXPECT_TRUE(detect::freedByCollector(storage, half));
  EXPECT_FALSE(detect::freedByCollector(storage, little));
  EXPECT_FALSE(detect::freedByCollector(storage, track::CollectedFrees{}));
}

TEST(HeldCauses, AGraphsBuildUpIsTheCollectorsWhenItFreedTensorsOfAQuarterOfItsSteps) {
  detect::Collapse graphs = collapseOf(true, 10, 49, 0);          // 40 steps
  EXPECT_FALSE(detect::collectorQuery(graphs).site.has_value());  // its tensors: many ops'
  EXPECT_TRUE(detect::freedByCollector(graphs, track::CollectedFrees{4096, 12, 10}));
  // A reset freeing the running total alone, with one unrelated cycle collected meanwhile.
  EXPECT_FALSE(detect::freedByCollector(graphs, track::CollectedFrees{64, 1, 1}));
  EXPECT_FALSE(detect::freedByCollector(graphs, track::CollectedFrees{512, 9, 9}));
}

LeakFinding keptAt(std::uint32_t site, const std::string& python_file) {
  LeakFinding finding;
  finding.category = LeakCategory::kTensorsRetained;
  finding.site.id = site;
  finding.site.op = "aten::empty";
  finding.site.outer_op = "aten::rand";
  if (!python_file.empty()) {
    StackFrame frame;
    frame.function = "step";
    frame.file = python_file;
    frame.line = 10;
    finding.site.frames.push_back(frame);
  }
  return finding;
}

// The same line keeping tensors in two phases (op-loop steps before a program's own, then its
// own): one finding, holding both phases' survivors. Another line, and a cause held and freed, stay
// findings of their own.
TEST(HeldCauses, OneCauseJudgedInTwoPhasesIsOneFinding) {
  std::vector<LeakFinding> findings{keptAt(7, "train.py"), keptAt(8, ""), keptAt(9, "train.py")};
  findings[0].survivors = 30;
  findings[2].survivors = 12;
  LeakFinding held = keptAt(7, "train.py");
  held.freed = HeldUntilFreed{};
  findings.push_back(held);
  detect::mergeFindingsOfOneCause(findings);
  ASSERT_EQ(findings.size(), 3u);
  EXPECT_EQ(findings[0].site.id, 7u);
  EXPECT_EQ(findings[0].survivors, 42);
  EXPECT_EQ(findings[1].site.id, 8u);
  EXPECT_TRUE(findings[2].freed.has_value());
}

// A report made after Python finalised reads no Python frame: its finding of a build-up recorded
// while the program ran (which named the line) is the same cause, by its site.
TEST(HeldCauses, AFindingThatLostItsPythonLineIsTheCauseOfTheSameSite) {
  detect::HeldCause cause;
  cause.finding = keptAt(7, "train.py");
  cause.key = detect::causeKey(cause.finding);
  EXPECT_TRUE(detect::sameCause(keptAt(7, "train.py"), cause));
  EXPECT_TRUE(detect::sameCause(keptAt(7, ""), cause));
  EXPECT_FALSE(detect::sameCause(keptAt(8, ""), cause));  // another site's tensors
  LeakFinding graphs = keptAt(7, "");
  graphs.category = LeakCategory::kAutogradGraphRetained;
  EXPECT_FALSE(detect::sameCause(graphs, cause));
}

}  // namespace
}  // namespace memseal
