// Allocations and frees from many threads at once: at::parallel_for workers, several std::threads,
// and tensors freed on another thread than the one that made them. Also run under ThreadSanitizer.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memseal/explain.h"
#include "memseal/tracker.h"

namespace memseal {
namespace {

TEST(TrackerConcurrency, ThreadsAllocatingAndFreeingBalanceExactly) {
  Tracker tracker;
  tracker.start();
  DeviceStats before = tracker.stats();
  constexpr int kThreads = 6;
  constexpr int kIterations = 400;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kIterations; ++i) {
        torch::Tensor a = torch::empty({16 + t + i % 7});
        torch::Tensor b = torch::empty({64});
      }
    });
  }
  for (auto& thread : threads) thread.join();
  DeviceStats after = tracker.stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.allocations_total - before.allocations_total, kThreads * kIterations * 2);
  EXPECT_EQ(after.frees_total - before.frees_total, kThreads * kIterations * 2);
}

TEST(TrackerConcurrency, TensorsFreedOnAnotherThreadAreCounted) {
  Tracker tracker;
  tracker.start();
  DeviceStats before = tracker.stats();
  std::vector<torch::Tensor> made(200);
  std::thread producer([&] {
    for (auto& tensor : made) tensor = torch::ones({100});
  });
  producer.join();
  EXPECT_EQ(tracker.stats().live_bytes - before.live_bytes, 200 * 400);
  std::thread consumer([&] { made.clear(); });
  consumer.join();
  EXPECT_EQ(tracker.stats().live_bytes, before.live_bytes);
}

TEST(TrackerConcurrency, ParallelForWorkersAreTracked) {
  Tracker tracker;
  tracker.start();
  DeviceStats before = tracker.stats();
  std::atomic<int> allocations{0};
  at::parallel_for(0, 64, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      torch::Tensor scratch = torch::empty({32});
      allocations.fetch_add(1);
    }
  });
  DeviceStats after = tracker.stats();
  EXPECT_EQ(after.allocations_total - before.allocations_total, allocations.load());
  EXPECT_EQ(after.live_bytes, before.live_bytes);
}

TEST(TrackerConcurrency, SnapshotsWhileOtherThreadsAllocate) {
  Tracker tracker(TrackerOptions{StackMode::kSampled, 8});
  tracker.start();
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      while (!stop.load()) {
        torch::Tensor x = torch::randn({32, 32}, torch::requires_grad());
        torch::Tensor y = (x * 2).sum();
        y.backward();
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    Snapshot snapshot = tracker.snapshot();
    EXPECT_GE(snapshot.cpu.live_bytes, 0);
  }
  stop.store(true);
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(tracker.stats().live_count, 0);
}

// Each site's (allocations, bytes) totals, by the MEMSEAL_REGION it was made in.
std::map<std::string, std::pair<std::int64_t, std::int64_t>> siteTotalsByRegion(
    const Tracker& tracker) {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> totals;
  for (const SiteSnapshot& site : tracker.snapshot().sites) {
    totals[site.site.scope] = {site.allocations_total, site.allocated_bytes_total};
  }
  return totals;
}

// `threads` threads each make, `rounds` times over, one tensor of `elements(site)` floats at each
// of `sites` sites, in MEMSEAL_REGION `region(thread, round, site)`; the last round's tensors stay
// alive so that every site is listed. Snapshots taken while the threads run never count more than
// threads * rounds allocations at a site. Returns the site totals once all have joined.
std::map<std::string, std::pair<std::int64_t, std::int64_t>> allocateAtSitesOnThreads(
    const Tracker& tracker, int threads, int rounds, int sites,
    const std::function<const char*(int thread, int round, int site)>& region,
    const std::function<std::int64_t(int site)>& elements) {
  std::vector<std::vector<torch::Tensor>> kept(threads);
  std::atomic<int> running{threads};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < rounds; ++round) {
        for (int site = 0; site < sites; ++site) {
          MEMSEAL_REGION(region(t, round, site));
          torch::Tensor tensor = torch::empty({elements(site)});
          if (round == rounds - 1) kept[t].push_back(tensor);
        }
      }
      running.fetch_sub(1);
    });
  }
  std::int64_t most = static_cast<std::int64_t>(threads) * rounds;
  while (running.load() > 0) {
    for (const auto& [name, totals] : siteTotalsByRegion(tracker)) {
      EXPECT_LE(totals.first, most) << name;
    }
  }
  for (std::thread& worker : workers) worker.join();
  return siteTotalsByRegion(tracker);
}

// Threads allocating at the same sites, in turn through nine of them: a snapshot taken meanwhile
// never counts an allocation twice, and once they are done every site's totals are exact.
TEST(TrackerConcurrency, SiteTotalsOfThreadsAllocatingAtTheSameSitesAddUpExactly) {
  Tracker tracker;
  tracker.start();
  constexpr int kThreads = 4;
  constexpr int kSites = 9;
  constexpr int kRounds = 300;
  const char* const names[kSites] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"};
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> totals = allocateAtSitesOnThreads(
      tracker, kThreads, kRounds + 1, kSites, [&](int, int, int site) { return names[site]; },
      [](int site) { return 8 + site; });
  for (int site = 0; site < kSites; ++site) {
    std::int64_t allocations = kThreads * (kRounds + 1);
    EXPECT_EQ(totals[names[site]].first, allocations) << names[site];
    EXPECT_EQ(totals[names[site]].second, allocations * (8 + site) * 4) << names[site];
  }
}

// More sites than a thread keeps totals for on its own: entries change hands between sites all
// the time, handing their amounts over to the shared totals, and nothing is lost or counted twice.
TEST(TrackerConcurrency, SiteTotalsStayExactWhenEachThreadAllocatesAtMoreSitesThanItCaches) {
  Tracker tracker;
  tracker.start();
  constexpr int kThreads = 3;
  constexpr int kSites = 1200;  // more than a thread's cache has entries (1024, site_totals.h)
  constexpr int kRounds = 6;
  std::vector<std::string> names;
  for (int site = 0; site < kSites; ++site) names.push_back("many-" + std::to_string(site));
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> totals = allocateAtSitesOnThreads(
      tracker, kThreads, kRounds, kSites,
      [&](int thread, int round, int site) {
        return names[(site * 7 + thread * 13 + round) % kSites].c_str();
      },
      [](int) { return 4; });
  for (const std::string& name : names) {
    EXPECT_EQ(totals[name].first, kThreads * kRounds) << name;
    EXPECT_EQ(totals[name].second, kThreads * kRounds * 4 * 4) << name;
  }
}

// Ops watched on every other step: setStep adds and removes the op observer while other threads
// run ops (an op that started watched must still end watched) and allocate by replay.
TEST(TrackerConcurrency, StepsTurnOpWatchingOnAndOffWhileThreadsRunOps) {
  TrackerOptions options;
  options.watch_ops = OpWatching::oneStepIn(2);
  Tracker tracker(options);
  tracker.start();
  DeviceStats before = tracker.stats();
  constexpr int kWorkers = 3;
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::vector<torch::Tensor> probes(kWorkers);
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&, t] {
      while (!stop.load()) {
        torch::Tensor x = torch::randn({16, 16}, torch::requires_grad());
        torch::Tensor y = (x.mm(x) * 2).sum();
        y.backward();
        rounds.fetch_add(1);
      }
      // On a watched step: named by its op only if every watched op start met its end.
      probes[t] = torch::ones({101 + t});
    });
  }
  std::uint32_t step = 1;
  for (; rounds.load() < 300 || step < 200; ++step) {
    setStep(step);
    std::this_thread::yield();
  }
  setStep(step + step % 2);  // a watched step for the probes
  stop.store(true);
  for (auto& worker : workers) worker.join();
  Snapshot snapshot = tracker.snapshot();
  std::int64_t probe_count = 0;
  for (const SiteSnapshot& site : snapshot.sites) {
    if (site.site.outer_op == "aten::ones") probe_count += site.live_count;
  }
  EXPECT_EQ(probe_count, kWorkers);
  probes.clear();
  DeviceStats after = tracker.stats();
  tracker.stop();
  setStep(0);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.allocations_total - before.allocations_total,
            after.frees_total - before.frees_total);
}

// The allocation trace claims ring slots with one atomic add: threads allocating and freeing at
// once lose no event, and a trace stopped while another thread allocates waits for the writers it
// races with and keeps at most its capacity.
TEST(TrackerConcurrency, TheAllocationTraceKeepsEveryEventOfEveryThread) {
  Tracker tracker;
  tracker.start();
  MemoryTrace trace(1 << 20);
  trace.start();
  DeviceStats before = tracker.stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 500; ++i) (void)torch::empty({16 + i % 7}).fill_(1.0f);
    });
  }
  for (std::thread& thread : threads) thread.join();
  DeviceStats after = tracker.stats();
  trace.stop();
  EXPECT_EQ(static_cast<std::int64_t>(trace.allocations()),
            after.allocations_total - before.allocations_total);
  EXPECT_EQ(static_cast<std::int64_t>(trace.frees()), after.frees_total - before.frees_total);
  EXPECT_GE(trace.allocations(), 4u * 500u);

  std::atomic<bool> running{true};
  std::thread worker([&] {
    while (running.load()) (void)torch::empty({64}).fill_(2.0f);
  });
  for (int round = 0; round < 20; ++round) {
    MemoryTrace racing(256);
    racing.start();
    for (int i = 0; i < 200; ++i) (void)torch::empty({8}).fill_(3.0f);
    racing.stop();
    EXPECT_LE(racing.allocations() + racing.frees(), 256u);
    EXPECT_GE(racing.allocations() + racing.frees() + racing.dropped(), 400u);
  }
  running.store(false);
  worker.join();
}

}  // namespace
}  // namespace memseal
