// Tensor pools on real libtorch tensors: lease lifetime (scope exit, exceptions, moves), each
// exhaustion policy, buckets and views, leases kept past release, destruction with leases out,
// pinned fallback, host staging, zero allocations in steady state, and what the leak detector and
// lifetime scopes make of pools.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "integration/detector_helpers.h"
#include "memseal/gtest.h"
#include "memseal/leak_detector.h"
#include "memseal/pool.h"
#include "memseal/scope.h"
#include "memseal/staging.h"

namespace memseal {
namespace {

TensorClassOptions oneBucket(const std::string& name, std::vector<std::int64_t> shape,
                             std::size_t capacity, PoolExhaustion policy) {
  TensorClassOptions options;
  options.name = name;
  for (std::int64_t size : shape) options.sizes.push_back({size});
  options.capacity = capacity;
  options.on_exhausted = policy;
  options.wait_timeout = std::chrono::milliseconds(20);
  return options;
}

TEST(TensorPool, ALeaseReturnsItsBufferAtScopeExit) {
  TensorPool pool({oneBucket("input", {4, 8}, 1, PoolExhaustion::kFail)});
  void* first = nullptr;
  {
    TensorLease lease = pool.acquire("input", {4, 8});
    ASSERT_TRUE(lease);
    first = lease->data_ptr();
    EXPECT_THROW(pool.acquire("input", {4, 8}), PoolExhaustedError);
  }
  TensorLease again = pool.acquire("input", {4, 8});
  EXPECT_EQ(again->data_ptr(), first);
  PoolStats stats = pool.stats();
  EXPECT_EQ(stats.buckets[0].acquisitions, 2);
  EXPECT_EQ(stats.buckets[0].leases_out, 1u);
  EXPECT_EQ(stats.buckets[0].failures, 1);
}

TEST(TensorPool, ALeaseReturnsItsBufferWhileAnExceptionUnwinds) {
  TensorPool pool({oneBucket("input", {16}, 1, PoolExhaustion::kFail)});
  EXPECT_THROW(
      {
        TensorLease lease = pool.acquire("input", {16});
        lease->fill_(1);
        throw std::runtime_error("request failed");
      },
      std::runtime_error);
  EXPECT_TRUE(pool.tryAcquire("input", {16}));
  EXPECT_EQ(pool.stats().buckets[0].leases_out, 0u);
}

TEST(TensorPool, MovedLeasesReturnTheirBufferExactlyOnce) {
  TensorPool pool({oneBucket("input", {8}, 2, PoolExhaustion::kFail)});
  TensorLease a = pool.acquire("input", {8});
  TensorLease moved(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from leases are empty by contract
  EXPECT_TRUE(moved);
  EXPECT_EQ(pool.stats().buckets[0].leases_out, 1u);
  TensorLease b = pool.acquire("input", {8});
  b = std::move(moved);  // b's own buffer goes back first
  EXPECT_EQ(pool.stats().buckets[0].leases_out, 1u);
  a.release();  // an empty lease: nothing happens
  b.release();
  b.release();
  EXPECT_EQ(pool.stats().buckets[0].leases_out, 0u);
  TensorLease c = pool.acquire("input", {8});
  TensorLease d = pool.acquire("input", {8});
  EXPECT_NE(c->data_ptr(), d->data_ptr());
}

TEST(TensorPool, FailPolicyNamesTheClassItsCapacityAndTheLeasesOut) {
  TensorPool pool({oneBucket("embeddings", {2, 4}, 2, PoolExhaustion::kFail)});
  TensorLease a = pool.acquire("embeddings", {2, 4});
  TensorLease b = pool.acquire("embeddings", {1, 4});
  try {
    pool.acquire("embeddings", {2, 4});
    FAIL() << "a third lease of a class of two";
  } catch (const PoolExhaustedError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("'embeddings'"), std::string::npos) << message;
    EXPECT_NE(message.find("capacity 2"), std::string::npos) << message;
    EXPECT_NE(message.find("2 leases out"), std::string::npos) << message;
  }
  EXPECT_FALSE(pool.tryAcquire("embeddings", {2, 4}));
}

TEST(TensorPool, WaitPolicyTimesOutWithAnErrorAndCountsTheWait) {
  TensorPool pool({oneBucket("input", {4}, 1, PoolExhaustion::kWait)});
  TensorLease held = pool.acquire("input", {4});
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(pool.acquire("input", {4}), PoolExhaustedError);
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(20));
  const PoolBucketStats stats = pool.stats().buckets[0];
  EXPECT_EQ(stats.waits, 1);
  EXPECT_EQ(stats.failures, 1);
  EXPECT_GE(stats.wait_ns, 20 * 1000 * 1000);
}

TEST(TensorPool, WaitPolicyHandsAReleasedBufferToTheWaiter) {
  TensorClassOptions options = oneBucket("input", {4}, 1, PoolExhaustion::kWait);
  options.wait_timeout = std::chrono::minutes(1);
  TensorPool pool({options});
  TensorLease held = pool.acquire("input", {4});
  void* buffer = held->data_ptr();
  std::atomic<void*> received{nullptr};
  std::thread waiter([&] {
    TensorLease lease = pool.acquire("input", {4});
    received = lease->data_ptr();
  });
  while (pool.stats().buckets[0].waits == 0) std::this_thread::yield();  // the waiter is blocked
  held.release();
  waiter.join();
  EXPECT_EQ(received.load(), buffer);
  EXPECT_EQ(pool.stats().buckets[0].failures, 0);
}

TEST(TensorPool, GrowPolicyAddsCountedBuffersUpToItsBound) {
  TensorClassOptions options = oneBucket("input", {32}, 1, PoolExhaustion::kGrow);
  options.max_buffers_per_bucket = 3;
  TensorPool pool({options});
  std::vector<TensorLease> leases;
  for (int i = 0; i < 3; ++i) leases.push_back(pool.acquire("input", {32}));
  const PoolBucketStats stats = pool.stats().buckets[0];
  EXPECT_EQ(stats.grows, 2);
  EXPECT_EQ(stats.buffers, 3u);
  EXPECT_EQ(stats.bytes_held, 3u * 32 * sizeof(float));
  EXPECT_EQ(stats.leases_high_water, 3u);
  try {
    pool.acquire("input", {32});
    FAIL() << "grew beyond max_buffers_per_bucket";
  } catch (const PoolExhaustedError& error) {
    EXPECT_NE(std::string(error.what()).find("max_buffers_per_bucket (3)"), std::string::npos);
  }
  leases.clear();
  EXPECT_EQ(pool.stats().buckets[0].leases_out, 0u);
}

TEST(TensorPool, ARequestLargerThanEveryBucketFailsOrGetsItsOwnBufferByPolicy) {
  TensorClassOptions strict = oneBucket("strict", {4, 8}, 1, PoolExhaustion::kWait);
  TensorClassOptions growing = oneBucket("growing", {4, 8}, 1, PoolExhaustion::kGrow);
  TensorPool pool({strict, growing});
  try {
    pool.acquire("strict", {4, 9});
    FAIL() << "an oversize request was served";
  } catch (const PoolExhaustedError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("[4, 9] is larger than every bucket (the largest is [4, 8])"),
              std::string::npos)
        << message;
  }
  {
    TensorLease big = pool.acquire("growing", {5, 8});
    ASSERT_TRUE(big);
    EXPECT_EQ(big->sizes(), (std::vector<std::int64_t>{5, 8}));
    big->fill_(2);
  }
  EXPECT_EQ(pool.stats().oversize_acquisitions, 1);
}

TEST(TensorPool, ALeaseIsAContiguousViewOfTheSmallestBucketThatFits) {
  TensorClassOptions options;
  options.name = "tokens";
  options.sizes = {{1, 2, 4, 8}, {64, 128}};
  options.dtype = torch::kInt64;
  options.capacity = 1;
  options.on_exhausted = PoolExhaustion::kFail;
  TensorPool pool({options});
  EXPECT_EQ(pool.stats().buckets.size(), 8u);
  TensorLease small = pool.acquire("tokens", {3, 100});
  EXPECT_EQ(small.bucketShape(), (std::vector<std::int64_t>{4, 128}));
  EXPECT_EQ(small->sizes(), (std::vector<std::int64_t>{3, 100}));
  EXPECT_EQ(small->scalar_type(), torch::kInt64);
  EXPECT_TRUE(small->is_contiguous());
  small->copy_(torch::arange(300).view({3, 100}));
  EXPECT_EQ(small->sum().item<std::int64_t>(), 299 * 300 / 2);
  // That bucket's one buffer is out: the next request of the same size goes one bucket up.
  TensorLease next = pool.acquire("tokens", {3, 100});
  EXPECT_EQ(next.bucketShape(), (std::vector<std::int64_t>{8, 128}));
  TensorLease exact = pool.acquire("tokens", {1, 64});
  EXPECT_EQ(exact.bucketShape(), (std::vector<std::int64_t>{1, 64}));
  EXPECT_THROW(pool.acquire("tokens", {3, 100}), PoolExhaustedError);
  TensorLease empty_request = pool.acquire("tokens", {0, 64});
  EXPECT_EQ(empty_request->numel(), 0);
}

TEST(TensorPool, BadOptionsAndRequestsAreRefusedWithTheClassNamed) {
  auto refused = [](std::vector<TensorClassOptions> classes, const std::string& expected) {
    try {
      TensorPool pool(std::move(classes));
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  refused({}, "at least one class");
  refused({oneBucket("", {4}, 1, PoolExhaustion::kWait)}, "has no name");
  refused({oneBucket("a", {4}, 0, PoolExhaustion::kWait)}, "'a': capacity must be at least 1");
  refused({oneBucket("a", {4}, 1, PoolExhaustion::kWait),
           oneBucket("a", {8}, 1, PoolExhaustion::kWait)},
          "'a' is defined twice");
  TensorClassOptions descending = oneBucket("d", {4}, 1, PoolExhaustion::kWait);
  descending.sizes = {{8, 4}};
  refused({descending}, "'d': sizes of dimension 0 must be strictly ascending (8 then 4)");
  TensorClassOptions no_dims = oneBucket("n", {}, 1, PoolExhaustion::kWait);
  refused({no_dims}, "'n': sizes has no dimension");
  TensorClassOptions gpu = oneBucket("g", {4}, 1, PoolExhaustion::kWait);
  gpu.device = torch::Device(torch::kCUDA, 0);
  gpu.pinned = true;
  refused({gpu}, "'g': pinned buffers are host memory");
  if (!torch::cuda::is_available()) {
    gpu.pinned = false;
    refused({gpu}, "'g': cannot make a buffer of shape [4] on cuda:0");
  }

  TensorPool pool({oneBucket("input", {4, 8}, 1, PoolExhaustion::kWait)});
  try {
    pool.acquire("inputs", {4, 8});
    ADD_FAILURE() << "an unknown class";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("no class 'inputs' (it has 'input')"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(pool.acquire("input", {32}), std::invalid_argument);
  EXPECT_THROW(pool.acquire("input", {-1, 8}), std::invalid_argument);
}

TEST(TensorPool, ABufferWhoseTensorIsStillReferencedIsNotHandedOutAgain) {
  TensorPool pool({oneBucket("input", {8}, 1, PoolExhaustion::kFail)});
  torch::Tensor kept;
  {
    TensorLease lease = pool.acquire("input", {8});
    lease->fill_(7);
    kept = *lease;  // the request keeps its tensor beyond the lease: a bug the pool survives
  }
  EXPECT_FALSE(pool.tryAcquire("input", {8}));
  EXPECT_EQ(pool.stats().buckets[0].held_after_release, 1);
  EXPECT_EQ(pool.stats().buckets[0].leases_out, 0u);
  EXPECT_EQ(kept.sum().item<float>(), 56);  // nobody wrote over it
  kept = torch::Tensor();
  TensorLease back = pool.acquire("input", {8});
  EXPECT_TRUE(back);
}

TEST(TensorPool, DestroyedWithLeasesOutItSaysSoAndTheirMemoryStaysValid) {
  auto pool = std::make_unique<TensorPool>(
      std::vector<TensorClassOptions>{oneBucket("input", {1024}, 2, PoolExhaustion::kFail)});
  TensorLease lease = pool->acquire("input", {1024});
  ::testing::internal::CaptureStderr();
  pool.reset();
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("destroyed with 1 lease(s) still out"), std::string::npos) << said;
  EXPECT_NE(said.find("class 'input' bucket [1024]: 1 out"), std::string::npos) << said;
  lease->fill_(3);  // under AddressSanitizer: no use after free
  EXPECT_EQ(lease->sum().item<float>(), 3 * 1024);
  lease.release();
}

TEST(TensorPool, PinnedBuffersFallBackToHostMemoryWithoutCuda) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA present: pinned buffers are real";
  TensorClassOptions options = oneBucket("staging", {64}, 1, PoolExhaustion::kFail);
  options.pinned = true;
  TensorPool pool({options});
  EXPECT_FALSE(pool.stats().buckets[0].pinned);
  TensorLease lease = pool.acquire("staging", {64});
  EXPECT_FALSE(lease->is_pinned());
}

TEST(TensorPool, SteadyStateAcquireAndReleaseAllocateNothing) {
  TensorClassOptions options;
  options.name = "input";
  options.sizes = {{1, 2, 4, 8}, {64}};
  options.capacity = 2;
  TensorPool pool({options});
  torch::Tensor source = torch::ones({8, 64});
  NoAllocationScope no_allocation;
  for (int i = 0; i < 200; ++i) {
    std::int64_t batch = 1 + i % 8;
    TensorLease lease = pool.acquire("input", {batch, 64});
    lease->copy_(source.narrow(0, 0, batch));
  }
  EXPECT_EQ(no_allocation.allocations(), 0);
}

TEST(HostStaging, UploadsThroughItsBuffersInRotation) {
  HostStaging staging(64 * sizeof(float), 2);
  torch::Tensor destination = torch::empty({8, 8});
  for (int i = 0; i < 5; ++i) {
    torch::Tensor source = torch::full({8, 8}, static_cast<double>(i), torch::kFloat64);
    staging.upload(source, destination);  // converts float64 to the destination's float32
    EXPECT_EQ(destination.sum().item<float>(), 64.0f * i);
  }
  staging.upload(torch::arange(64).view({8, 8}).t(), destination);  // non-contiguous source
  EXPECT_EQ(destination[0][1].item<float>(), 8.0f);
  staging.synchronize();
  HostStagingStats stats = staging.stats();
  EXPECT_EQ(stats.uploads, 6);
  EXPECT_EQ(stats.bytes, 6 * 64 * 4);
  EXPECT_EQ(staging.pinned(), torch::cuda::is_available());
}

TEST(HostStaging, RefusesWhatItCannotCopy) {
  EXPECT_THROW(HostStaging(0), std::invalid_argument);
  EXPECT_THROW(HostStaging(64, 0), std::invalid_argument);
  HostStaging staging(16);
  torch::Tensor four = torch::empty({4});
  EXPECT_THROW(staging.upload(torch::ones({5}), torch::empty({5})), std::invalid_argument);
  EXPECT_THROW(staging.upload(torch::ones({3}), four), std::invalid_argument);
  EXPECT_THROW(staging.upload(torch::ones({4}), torch::empty({4, 2}).select(1, 0)),
               std::invalid_argument);
}

TEST(HostStaging, OverlapsDeviceCopiesAndKeepsBuffersUntilTheirCopyIsDone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  HostStaging staging(1 << 20, 2);
  ASSERT_TRUE(staging.pinned());
  std::vector<torch::Tensor> destinations;
  for (int i = 0; i < 8; ++i) {
    destinations.push_back(torch::empty({1 << 18}, torch::Device(torch::kCUDA)));
    staging.upload(torch::full({1 << 18}, static_cast<float>(i)), destinations.back());
  }
  staging.synchronize();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(destinations[static_cast<std::size_t>(i)].mean().item<float>(),
              static_cast<float>(i));
  }
}

// The detector: a pool made lazily after warm-up, and grown while the loop warms up, is healthy;
// leases kept across steps are a leak named by the pool class.
using test::quietDetector;

TEST(TensorPoolLeaks, APoolMadeAndGrownDuringTheLoopIsNotALeak) {
  LeakDetector detector(quietDetector());
  std::unique_ptr<TensorPool> pool;
  for (int step = 0; step < 30; ++step) {
    if (step == 6) {  // made lazily, after warm-up, as servers often do
      TensorClassOptions options = oneBucket("input", {256}, 1, PoolExhaustion::kGrow);
      pool = std::make_unique<TensorPool>(std::vector<TensorClassOptions>{options});
    }
    if (pool) {
      std::vector<TensorLease> batch;  // up to 4 leases at once: the pool grows to 4, then stays
      for (int i = 0; i <= std::min(step - 6, 3); ++i)
        batch.push_back(pool->acquire("input", {256}));
      for (TensorLease& lease : batch) lease->fill_(1);
    }
    detector.step();
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_EQ(pool->stats().buckets[0].grows, 3);
}

TEST(TensorPoolLeaks, LeasesKeptAcrossStepsAreReportedWithTheirPoolClass) {
  TensorClassOptions options = oneBucket("request-input", {4, 256}, 2, PoolExhaustion::kGrow);
  TensorPool pool({options});
  std::vector<TensorLease> kept;  // the bug: leases stored "for later" and never dropped
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 30; ++step) {
    TensorLease lease = pool.acquire("request-input", {3, 256});
    lease->fill_(step);
    kept.push_back(std::move(lease));
    detector.step();
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  const LeakFinding& finding = report.findings.front();
  EXPECT_EQ(finding.category, LeakCategory::kTensorsRetained) << report.toText();
  EXPECT_NE(finding.site.op.find("TensorPool lease 'request-input' [4, 256]"), std::string::npos)
      << report.toText();
  EXPECT_NE(finding.hint.find("Leases of pool class 'request-input' [4, 256]"), std::string::npos)
      << finding.hint;
  EXPECT_EQ(finding.tensor.shape, (std::vector<std::int64_t>{3, 256}));
  // One cause: the grown buffers behind the leases are the pool's, not a second finding.
  EXPECT_EQ(report.findings.size(), 1u) << report.toText();
}

TEST(TensorPoolScopes, PoolBuffersAreNotSurvivorsButAKeptLeaseIs) {
  std::unique_ptr<TensorPool> pool;
  TensorLease escaped;
  LifetimeScope scope("request", testing::quietScopeOptions());
  pool = std::make_unique<TensorPool>(
      std::vector<TensorClassOptions>{oneBucket("input", {128}, 2, PoolExhaustion::kFail)});
  {
    TensorLease lease = pool->acquire("input", {100});
    lease->fill_(1);
  }
  escaped = pool->acquire("input", {64});
  ScopeReport report = scope.close();
  ASSERT_EQ(report.stats.survivors, 1) << report.toText();
  EXPECT_NE(report.survivors[0].site.op.find("TensorPool lease 'input' [128]"), std::string::npos)
      << report.toText();
  EXPECT_EQ(report.survivors[0].allocation.bytes, 64u * sizeof(float));
}

TEST(TensorPoolScopes, ATensorKeptPastItsLeaseIsStillASurvivor) {
  TensorPool pool({oneBucket("input", {32}, 1, PoolExhaustion::kFail)});
  torch::Tensor kept;
  LifetimeScope scope("request", testing::quietScopeOptions());
  {
    TensorLease lease = pool.acquire("input", {32});
    kept = *lease;  // outlives the lease: the buffer is held, and so is its record
  }
  ScopeReport report = scope.close();
  ASSERT_EQ(report.stats.survivors, 1) << report.toText();
  EXPECT_NE(report.survivors[0].site.op.find("TensorPool lease 'input' [32]"), std::string::npos);
  kept = torch::Tensor();
  EXPECT_TRUE(pool.tryAcquire("input", {32}));  // back in service, its record gone
}

TEST(TensorPoolScopes, AKeptLeaseMovesToTheEnclosingScope) {
  TensorPool pool({oneBucket("input", {16}, 1, PoolExhaustion::kFail)});
  TensorLease lease;
  LifetimeScope outer("outer", testing::quietScopeOptions());
  {
    LifetimeScope inner("inner", testing::quietScopeOptions());
    lease = pool.acquire("input", {16});
    inner.keep(*lease);
    EXPECT_TRUE(inner.close().clean());
  }
  ScopeReport report = outer.close();  // the lease is still held: the outer scope's survivor
  ASSERT_EQ(report.stats.survivors, 1) << report.toText();
  EXPECT_NE(report.survivors[0].site.op.find("TensorPool lease 'input' [16]"), std::string::npos);
}

}  // namespace
}  // namespace memseal
