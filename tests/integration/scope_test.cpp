// Lifetime scopes on real libtorch code: clean regions, survivors, keep/move to outer, nested
// scopes, backward inside a scope, exceptions, threads, policies and allocation-free regions.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <thread>

#include "memseal/gtest.h"
#include "memseal/scope.h"

namespace memseal {
namespace {

ScopeOptions quiet() { return testing::quietScopeOptions(); }

std::vector<torch::Tensor> g_global_container;

TEST(LifetimeScope, TemporariesAreFreedSoTheScopeIsClean) {
  LifetimeScope scope("temporaries", quiet());
  float total = 0;
  {
    torch::Tensor x = torch::randn({64, 64});
    total = x.matmul(x).relu().sum().item<float>();
  }
  ScopeReport report = scope.close();
  EXPECT_TRUE(report.clean()) << report.toText();
  EXPECT_GE(report.stats.made, 4);
  EXPECT_EQ(report.stats.freed, report.stats.made);
  EXPECT_GT(report.stats.made_bytes, 64 * 64 * 4);
  (void)total;
}

TEST(LifetimeScope, ATensorStoredInAGlobalContainerSurvives) {
  LifetimeScope scope("stores globally", quiet());
  g_global_container.push_back(torch::ones({32, 8}));
  ScopeReport report = scope.close();
  ASSERT_FALSE(report.clean());
  EXPECT_EQ(report.stats.survivors, 1);
  EXPECT_EQ(report.stats.survivor_bytes, 32 * 8 * 4);
  ASSERT_EQ(report.survivors.size(), 1u);
  EXPECT_EQ(report.survivors[0].site.outer_op, "aten::ones");
  EXPECT_EQ(report.survivors[0].allocation.tensor.shape, (std::vector<std::int64_t>{32, 8}));
  EXPECT_NE(report.toText().find("still alive"), std::string::npos);
  g_global_container.clear();
}

TEST(LifetimeScope, KeptTensorsAreNotSurvivors) {
  torch::Tensor result;
  LifetimeScope scope("returns a result", quiet());
  torch::Tensor temporary = torch::randn({16});
  result = scope.keep(temporary * 2);
  temporary = torch::Tensor();
  ScopeReport report = scope.close();
  EXPECT_TRUE(report.clean()) << report.toText();
  EXPECT_EQ(report.stats.kept, 1);
  EXPECT_EQ(report.stats.kept_bytes, 16 * 4);
}

TEST(LifetimeScope, NestedScopesMoveKeptTensorsToTheOuterScope) {
  torch::Tensor escaped;
  LifetimeScope outer("outer", quiet());
  {
    LifetimeScope inner("inner", quiet());
    escaped = inner.keep(torch::zeros({10}));
    ScopeReport inner_report = inner.close();
    EXPECT_TRUE(inner_report.clean());
  }
  // Moved to the outer scope: the outer scope owns it now, and it is still alive.
  ScopeReport outer_report = outer.close();
  EXPECT_EQ(outer_report.stats.survivors, 1);
  EXPECT_EQ(outer_report.survivors[0].allocation.tensor.shape, std::vector<std::int64_t>{10});
}

TEST(LifetimeScope, DetachedTensorsLeaveEveryScope) {
  torch::Tensor detached;
  LifetimeScope outer("outer", quiet());
  {
    LifetimeScope inner("inner", quiet());
    detached = inner.detach(torch::zeros({10}));
    EXPECT_TRUE(inner.close().clean());
  }
  EXPECT_TRUE(outer.close().clean());
}

TEST(LifetimeScope, BackwardInsideAScopeIsAccountedFor) {
  torch::nn::Linear layer(8, 4);
  {
    LifetimeScope scope("backward", quiet());
    layer->forward(torch::randn({2, 8})).sum().backward();
    ScopeReport report = scope.close();
    // The gradients autograd made are alive after the scope: one per parameter.
    EXPECT_EQ(report.stats.survivors, 2) << report.toText();
    EXPECT_EQ(report.stats.survivor_bytes, (8 * 4 + 4) * 4);
  }
  layer->zero_grad();  // set_to_none frees them
  {
    LifetimeScope scope("backward then zero_grad", quiet());
    layer->forward(torch::randn({2, 8})).sum().backward();
    layer->zero_grad();
    EXPECT_TRUE(scope.close().clean());
  }
}

TEST(LifetimeScope, ExceptionsUnwindThroughAScope) {
  try {
    LifetimeScope scope("throws", quiet());
    torch::Tensor temporary = torch::ones({100});
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  // The thread is back outside any scope: a new scope works and is clean.
  LifetimeScope after("after", quiet());
  torch::Tensor t = torch::ones({3});
  t = torch::Tensor();
  EXPECT_TRUE(after.close().clean());
}

TEST(LifetimeScope, ScopesOnSeveralThreadsAtOnceCountOnlyTheirOwn) {
  constexpr int kThreads = 4;
  std::vector<std::vector<torch::Tensor>> kept_alive(kThreads);
  std::vector<ScopeReport> reports(kThreads);
  Tracker tracker;  // one tracker for all threads
  tracker.start();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      LifetimeScope scope("thread " + std::to_string(t), quiet());
      for (int i = 0; i < 50; ++i) {
        torch::Tensor x = torch::randn({8});
        if (i < t) kept_alive[t].push_back(x);  // thread t leaves t survivors
      }
      reports[t] = scope.close();
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(reports[t].stats.survivors, t) << reports[t].toText();
    EXPECT_EQ(reports[t].stats.made, 50);
  }
}

TEST(LifetimeScope, CloseThrowsWithTheSurvivorsByDefault) {
  LifetimeScope scope("default policy");
  g_global_container.push_back(torch::ones({4}));
  EXPECT_THROW(scope.close(), ScopeLeakError);
  g_global_container.clear();
}

TEST(LifetimeScope, CallbackPolicyAndMisuse) {
  int calls = 0;
  ScopeOptions options;
  options.on_survivors = ReportPolicy::kCallback;
  options.on_survivors_callback = [&](const ScopeReport&) { ++calls; };
  {
    LifetimeScope scope("callback", options);
    g_global_container.push_back(torch::ones({4}));
    scope.close();
    EXPECT_THROW(scope.close(), std::logic_error);
  }
  EXPECT_EQ(calls, 1);
  g_global_container.clear();
  ScopeOptions no_callback;
  no_callback.on_survivors = ReportPolicy::kCallback;
  EXPECT_THROW(LifetimeScope("no callback", no_callback), std::invalid_argument);
}

TEST(NoAllocationScope, CountsSystemAllocationsOnly) {
  torch::Tensor buffer = torch::zeros({256});
  torch::Tensor source = torch::ones({256});
  {
    NoAllocationScope region;
    buffer.add_(source);  // in place, tensor operands: no allocation
    buffer.mul_(source);
    EXPECT_EQ(region.allocations(), 0);
    torch::Tensor fresh = buffer + source;
    EXPECT_EQ(region.allocations(), 1);
  }
  EXPECT_NO_ALLOCATION(buffer.copy_(source));
}

TEST(GtestHelpers, PassOnCleanCode) {
  torch::Tensor x = torch::randn({16});
  EXPECT_NO_TENSOR_LEAK({ torch::Tensor y = x * 2, z = y + 1; });
  ASSERT_NO_TENSOR_LEAK(x.sum().item<float>());
}

}  // namespace
}  // namespace memseal
