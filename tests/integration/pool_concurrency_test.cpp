// Many threads leasing from a small pool for a fixed count: no buffer is leased to two holders at
// once (each holder writes its own pattern over the whole buffer and checks it before releasing),
// none is lost (every buffer can be leased at the end), and the statistics add up to what the
// threads saw. Also run under AddressSanitizer and ThreadSanitizer.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "memseal/pool.h"

namespace memseal {
namespace {

// What one thread saw; summed and compared with the pool's statistics at the end.
struct Seen {
  std::int64_t leased = 0;     // leases from a bucket
  std::int64_t oversize = 0;   // kGrow's own buffers for requests larger than every bucket
  std::int64_t refused = 0;    // PoolExhaustedError
  std::int64_t unwound = 0;    // exceptions thrown while holding leases
  std::int64_t corrupted = 0;  // a buffer that another holder wrote while this one held it
};

// A lease with the pattern its holder wrote over it.
struct Held {
  TensorLease lease;
  std::int32_t pattern = 0;
};

Held holdWith(TensorLease lease, std::int32_t pattern) {
  std::int32_t* data = lease->data_ptr<std::int32_t>();
  for (std::int64_t k = 0; k < lease->numel(); ++k) data[k] = pattern;
  return Held{std::move(lease), pattern};
}

// Checks the pattern, then gives the buffer back.
void letGo(Held& held, Seen& seen) {
  const std::int32_t* data = held.lease->data_ptr<std::int32_t>();
  for (std::int64_t k = 0; k < held.lease->numel(); ++k) {
    if (data[k] != held.pattern) {
      ++seen.corrupted;
      break;
    }
  }
  held.lease.release();
}

TEST(TensorPoolConcurrency, NoBufferIsLeasedTwiceAndNoneIsLost) {
  constexpr int kThreads = 4;
  constexpr int kLeasesPerThread = 1500;
  TensorClassOptions options;
  options.name = "input";
  options.sizes = {{2, 4}, {64}};
  options.dtype = torch::kInt32;
  options.capacity = 2;
  options.on_exhausted = PoolExhaustion::kWait;
  options.wait_timeout = std::chrono::minutes(1);
  TensorPool pool({options});
  std::vector<Seen> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLeasesPerThread; ++i) {
        std::int64_t rows = 1 + (i + t) % 4;
        Held held = holdWith(pool.acquire("input", {rows, 64}), t * 1000000 + i);
        std::this_thread::yield();  // let other holders run while this one holds the buffer
        letGo(held, seen[t]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Seen& thread_saw : seen) EXPECT_EQ(thread_saw.corrupted, 0);
  PoolStats stats = pool.stats();
  std::int64_t acquisitions = 0;
  for (const PoolBucketStats& bucket : stats.buckets) {
    acquisitions += bucket.acquisitions;
    EXPECT_EQ(bucket.leases_out, 0u);
    EXPECT_LE(bucket.leases_high_water, bucket.buffers);
    EXPECT_EQ(bucket.failures, 0);
  }
  EXPECT_EQ(acquisitions, kThreads * kLeasesPerThread);
  // All four buffers can be leased at once again ([2, 64] requests fit both buckets).
  std::vector<TensorLease> all;
  for (int i = 0; i < 4; ++i) all.push_back(pool.tryAcquire("input", {2, 64}));
  for (const TensorLease& lease : all) EXPECT_TRUE(lease);
  EXPECT_FALSE(pool.tryAcquire("input", {2, 64}));
}

TensorClassOptions poolClass(const char* name, PoolExhaustion policy, std::size_t capacity) {
  TensorClassOptions options;
  options.name = name;
  options.sizes = {{2, 4}, {16, 32}};
  options.dtype = torch::kInt32;
  options.capacity = capacity;
  options.on_exhausted = policy;
  options.wait_timeout = std::chrono::minutes(5);  // a timeout would be a lost buffer
  return options;
}

// Random lease lifetimes over three policies: several leases held at once and let go in random
// order, leases handed to another thread to end, exceptions thrown while holding leases,
// requests larger than every bucket. A thread waits only while it holds no lease of the waiting
// class, and before it waits it ends the waiting class's leases handed over to the mailbox: were
// they left there, every thread could wait for buffers only a running thread would give back
// (each wait then ends at the class's timeout, minutes later).
TEST(TensorPoolConcurrency, RandomLeaseLifetimesKeepEveryInvariant) {
  constexpr int kThreads = 4;
  constexpr int kOperationsPerThread = 3000;
  TensorClassOptions grow = poolClass("grow", PoolExhaustion::kGrow, 1);
  grow.max_buffers_per_bucket = 3;
  TensorPool pool({poolClass("wait", PoolExhaustion::kWait, 2), grow,
                   poolClass("fail", PoolExhaustion::kFail, 1)});
  const char* const kClasses[] = {"wait", "grow", "fail"};
  std::mutex mailbox_mutex;
  std::vector<Held> mailbox;  // leases one thread made and another ends
  std::vector<Seen> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(1234 + t);
      Seen& mine = seen[t];
      std::vector<Held> held;
      auto holdsWaitClass = [&] {
        for (const Held& h : held) {
          if (h.lease->numel() > 0 && h.pattern % 3 == 0) return true;
        }
        return false;
      };
      auto endHandedOverWaitClass = [&] {
        std::vector<Held> taken;
        {
          std::lock_guard<std::mutex> lock(mailbox_mutex);
          for (auto it = mailbox.begin(); it != mailbox.end();) {
            if (it->pattern % 3 != 0) {
              ++it;
              continue;
            }
            taken.push_back(std::move(*it));
            it = mailbox.erase(it);
          }
        }
        for (Held& h : taken) letGo(h, mine);
      };
      for (int i = 0; i < kOperationsPerThread; ++i) {
        std::int32_t pattern = (t * kOperationsPerThread + i) * 3;
        int choice = static_cast<int>(random() % 10);
        std::int64_t rows = 1 + static_cast<std::int64_t>(random() % 4);
        std::int64_t columns = 1 + static_cast<std::int64_t>(random() % 32);
        int class_index = static_cast<int>(random() % 3);
        if (choice < 4 && held.size() < 3) {  // acquire (wait, grow or fail)
          if (class_index == 0 && holdsWaitClass()) class_index = 1;
          if (class_index == 0) endHandedOverWaitClass();
          std::int32_t tagged = pattern + class_index;  // pattern % 3 names the class
          bool oversize = class_index == 1 && random() % 8 == 0;
          try {
            TensorLease lease = pool.acquire(kClasses[class_index], {oversize ? 9 : rows, columns});
            (oversize ? mine.oversize : mine.leased) += 1;
            held.push_back(holdWith(std::move(lease), tagged));
          } catch (const PoolExhaustedError&) {
            ++mine.refused;
          }
        } else if (choice < 5) {  // tryAcquire: an empty lease when nothing is free
          TensorLease lease = pool.tryAcquire(kClasses[class_index], {rows, columns});
          if (lease) {
            ++mine.leased;
            Held tried = holdWith(std::move(lease), pattern + class_index);
            letGo(tried, mine);
          }
        } else if (choice < 7 && !held.empty()) {  // end a random one of those held
          std::size_t index = random() % held.size();
          letGo(held[index], mine);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(index));
        } else if (choice < 8 && !held.empty()) {  // hand the newest to whoever ends it
          std::lock_guard<std::mutex> lock(mailbox_mutex);
          mailbox.push_back(std::move(held.back()));
          held.pop_back();
        } else if (choice < 9) {  // end one another thread handed over
          Held taken;
          {
            std::lock_guard<std::mutex> lock(mailbox_mutex);
            if (mailbox.empty()) continue;
            taken = std::move(mailbox.back());
            mailbox.pop_back();
          }
          letGo(taken, mine);
        } else {  // throw while holding a lease of its own: unwinding gives it back
          try {
            Held kept;
            TensorLease lease = pool.tryAcquire("grow", {rows, columns});
            if (lease) {
              ++mine.leased;
              kept = holdWith(std::move(lease), pattern + 1);
            }
            throw std::runtime_error("the step failed");
          } catch (const std::runtime_error&) {
            ++mine.unwound;
          }
        }
      }
      for (Held& h : held) letGo(h, mine);
    });
  }
  for (std::thread& thread : threads) thread.join();
  Seen total;
  for (Held& h : mailbox) letGo(h, total);
  for (const Seen& s : seen) {
    total.leased += s.leased;
    total.oversize += s.oversize;
    total.refused += s.refused;
    total.unwound += s.unwound;
    total.corrupted += s.corrupted;
  }
  EXPECT_EQ(total.corrupted, 0);
  EXPECT_GT(total.refused, 0);  // the fail class and grow's bound were reached
  EXPECT_GT(total.unwound, 0);
  PoolStats stats = pool.stats();
  std::int64_t acquisitions = 0;
  std::int64_t failures = 0;
  for (const PoolBucketStats& bucket : stats.buckets) {
    acquisitions += bucket.acquisitions;
    failures += bucket.failures;
    EXPECT_EQ(bucket.leases_out, 0u) << bucket.class_name;
    EXPECT_LE(bucket.leases_high_water, bucket.buffers) << bucket.class_name;
    if (bucket.class_name == "grow") {
      EXPECT_LE(bucket.buffers, 3u);
    } else if (bucket.class_name == "wait") {
      EXPECT_EQ(bucket.buffers, 2u);
      EXPECT_EQ(bucket.failures, 0) << "a wait ran into its timeout";
    }
  }
  EXPECT_EQ(acquisitions, total.leased);
  EXPECT_EQ(stats.oversize_acquisitions, total.oversize);
  EXPECT_EQ(failures, total.refused);
  // Nothing was lost: every buffer of every bucket can be leased again at once.
  std::vector<TensorLease> all;
  for (const PoolBucketStats& bucket : stats.buckets) {
    for (std::size_t i = 0; i < bucket.buffers; ++i) {
      all.push_back(pool.tryAcquire(bucket.class_name, bucket.shape));
      EXPECT_TRUE(all.back()) << bucket.class_name;
    }
  }
}

// The pool goes while a thread waits in acquire() for its only buffer: the waiter keeps the
// classes alive, and gets the buffer when its lease ends after the pool is gone.
TEST(TensorPoolConcurrency, APoolDestroyedWhileAThreadWaitsHandsItTheBufferReleasedLater) {
  TensorClassOptions one_buffer = poolClass("wait", PoolExhaustion::kWait, 1);
  one_buffer.sizes = {{2}, {16}};  // one bucket: no larger one to serve the waiter instead
  auto pool = std::make_unique<TensorPool>(std::vector<TensorClassOptions>{one_buffer});
  TensorLease held = pool->acquire("wait", {2, 16});
  std::atomic<bool> got{false};
  std::thread waiter([&pool, &got] {
    TensorLease lease = pool->acquire("wait", {2, 16});
    Seen seen;
    Held mine = holdWith(std::move(lease), 7);
    letGo(mine, seen);
    got = seen.corrupted == 0;
  });
  // The wait is counted under the class's lock before the waiter sleeps: once stats() shows it,
  // the waiter is inside acquire() and no longer reads `pool`.
  while (pool->stats().buckets.front().waits == 0) std::this_thread::yield();
  ::testing::internal::CaptureStderr();
  pool.reset();
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("TensorPool destroyed with 1 lease(s) still out"), std::string::npos) << said;
  held.release();  // the waiter's turn
  waiter.join();
  EXPECT_TRUE(got.load());
}

}  // namespace
}  // namespace memseal
