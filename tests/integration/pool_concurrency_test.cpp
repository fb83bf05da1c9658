// Many threads leasing from a small pool for a fixed count: no buffer is leased to two holders at
// once (each holder writes its own pattern over the whole buffer and checks it before releasing),
// none is lost (every buffer can be leased at the end). Also run under ThreadSanitizer.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "memseal/pool.h"

namespace memseal {
namespace {

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
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLeasesPerThread; ++i) {
        std::int64_t rows = 1 + (i + t) % 4;
        TensorLease lease = pool.acquire("input", {rows, 64});
        std::int32_t pattern = t * 1000000 + i;
        std::int32_t* data = lease->data_ptr<std::int32_t>();
        std::int64_t count = lease->numel();
        for (std::int64_t k = 0; k < count; ++k) data[k] = pattern;
        std::this_thread::yield();  // let other holders run while this one holds the buffer
        for (std::int64_t k = 0; k < count; ++k) {
          if (data[k] != pattern) {
            ++corrupted;
            break;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(corrupted.load(), 0);
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

}  // namespace
}  // namespace memseal
