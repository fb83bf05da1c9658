// Live bytes and their peak kept per thread: exact for one thread across hand-overs and peak
// resets, an idle thread's memory counted as it stands, two threads' simultaneous highs missed by
// no more than the hand-over band, and real threads adding up once quiet. Threads are simulated
// by their ThreadState where the order of events matters (each ThreadState gets its own slot).
#include "track/memory_counters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace memseal::track {
namespace {

constexpr std::int64_t kBand = MemoryCounters::kHandOverBytes;

// What the counters must say when one order of events is known.
struct ExactModel {
  std::int64_t live = 0;
  std::int64_t peak = 0;
  void allocate(std::int64_t bytes) {
    live += bytes;
    peak = std::max(peak, live);
  }
  void free(std::int64_t bytes) { live -= bytes; }
  void resetPeak() { peak = live; }
};

std::unique_ptr<MemoryCounters> freshCounters() {
  auto counters = std::make_unique<MemoryCounters>();
  counters->beginSession();
  return counters;
}

TEST(MemoryCounters, OneThreadsLiveBytesAndPeakAreExactAcrossHandOversAndResets) {
  auto counters = freshCounters();
  ThreadState state{};
  ExactModel model;
  std::vector<std::int64_t> held;
  std::uint64_t random = 12345;
  auto next = [&random] {
    random = random * 6364136223846793005ULL + 1442695040888963407ULL;
    return random >> 33;
  };
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t choice = next() % 100;
    if (choice < 55 || held.empty()) {
      // Mostly small, sometimes larger than the band: both kinds of hand-over happen.
      auto bytes =
          static_cast<std::int64_t>(choice < 5 ? next() % (3 * kBand) : next() % 65536) + 1;
      counters->onAllocate(state, bytes);
      model.allocate(bytes);
      held.push_back(bytes);
    } else {
      std::size_t index = next() % held.size();
      std::int64_t bytes = held[index];
      held[index] = held.back();
      held.pop_back();
      counters->onFree(state, bytes);
      model.free(bytes);
    }
    if (i % 997 == 0) {
      counters->resetPeak();
      model.resetPeak();
    }
    DeviceStats stats = counters->read("cpu");
    ASSERT_EQ(stats.live_bytes, model.live) << "after event " << i;
    ASSERT_EQ(stats.peak_bytes, model.peak) << "after event " << i;
    ASSERT_EQ(counters->liveBytes(), model.live);
    ASSERT_EQ(counters->peakBytes(), model.peak);
  }
}

TEST(MemoryCounters, AnIdleThreadsMemoryCountsAsItStandsInTheOthersPeak) {
  auto counters = freshCounters();
  ThreadState idle{};
  ThreadState busy{};
  counters->onAllocate(idle, 500000);  // within the band: stays in the idle thread's delta
  for (int i = 0; i < 100; ++i) {
    counters->onAllocate(busy, 300000);
    counters->onFree(busy, 300000);
  }
  DeviceStats stats = counters->read("cpu");
  EXPECT_EQ(stats.live_bytes, 500000);
  EXPECT_EQ(stats.peak_bytes, 800000);
  EXPECT_EQ(stats.allocations_total, 101);
  EXPECT_EQ(stats.frees_total, 100);
  EXPECT_EQ(stats.live_count, 1);
}

TEST(MemoryCounters, TwoThreadsAtTheirHighsAtOnceAreMissedByNoMoreThanTheBand) {
  auto counters = freshCounters();
  ThreadState first{};
  ThreadState second{};
  // Both at 600,000 at the same moment (1,200,000 live), then both back to nothing, each delta
  // within the band all along: each thread's high is seen with the other where it stands now.
  counters->onAllocate(first, 600000);
  counters->onAllocate(second, 600000);
  counters->onFree(first, 600000);
  counters->onFree(second, 600000);
  std::int64_t peak = counters->peakBytes();
  EXPECT_GE(peak, 600000);
  EXPECT_LE(peak, 1200000);
  EXPECT_GE(peak, 1200000 - 2 * kBand);
  EXPECT_EQ(counters->liveBytes(), 0);

  // A delta that leaves the band is handed over with the others' deltas as they stand: exact.
  auto exact = freshCounters();
  ThreadState holding{};  // slots are given by the counters they count in
  ThreadState crossing{};
  exact->onAllocate(holding, 600000);
  exact->onAllocate(crossing, kBand + 1);
  exact->onFree(crossing, kBand + 1);
  exact->onFree(holding, 600000);
  EXPECT_EQ(exact->peakBytes(), 600000 + kBand + 1);
  EXPECT_EQ(exact->liveBytes(), 0);
}

TEST(MemoryCounters, ASessionStartsFromNothingWhatEarlierDeltasHeld) {
  auto counters = freshCounters();
  ThreadState state{};
  counters->onAllocate(state, 4096);
  counters->onAllocate(state, 3 * kBand);  // handed over
  counters->onFree(state, 100);
  counters->beginSession();
  DeviceStats stats = counters->read("cpu");
  EXPECT_EQ(stats.live_bytes, 0);
  EXPECT_EQ(stats.peak_bytes, 0);
  EXPECT_EQ(stats.allocations_total, 0);
  counters->onAllocate(state, 512);
  stats = counters->read("cpu");
  EXPECT_EQ(stats.live_bytes, 512);
  EXPECT_EQ(stats.peak_bytes, 512);
}

TEST(MemoryCounters, ThreadsAllocatingAtOnceAddUpOnceQuiet) {
  auto counters = freshCounters();
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counters, t] {
      ThreadState state{};
      std::vector<std::int64_t> kept;
      for (int i = 0; i < kRounds; ++i) {
        std::int64_t bytes = 64 + (i % 7) * 4096 + t;
        counters->onAllocate(state, bytes);
        if (i % 10 == 0) {
          kept.push_back(bytes);  // this thread's memory that stays live
        } else {
          counters->onFree(state, bytes);
        }
      }
      // Memory freed by a thread that did not allocate it: the other's share of the live bytes.
      std::int64_t moved = kept.back();
      kept.pop_back();
      ThreadState freeing_thread{};
      counters->onFree(freeing_thread, moved);
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::int64_t expected = 0;
  for (int t = 0; t < kThreads; ++t) {
    std::int64_t kept = 0;
    for (int i = 0; i < kRounds; i += 10) kept += 64 + (i % 7) * 4096 + t;
    expected += kept - (64 + ((kRounds - 10) % 7) * 4096 + t);
  }
  DeviceStats stats = counters->read("cpu");
  EXPECT_EQ(stats.live_bytes, expected);
  EXPECT_EQ(stats.allocations_total, kThreads * kRounds);
  EXPECT_EQ(stats.frees_total, kThreads * (kRounds - kRounds / 10 + 1));
  EXPECT_GE(stats.peak_bytes, expected);
}

}  // namespace
}  // namespace memseal::track
