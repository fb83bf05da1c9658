// GoogleTest support: one-line assertions that a statement leaves no tensor alive, and a listener
// that checks every test of a binary. Include after <gtest/gtest.h>.
//
//   EXPECT_NO_TENSOR_LEAK(model->forward(x));
//   ASSERT_NO_TENSOR_LEAK({ auto y = f(x); g(y); });
//   EXPECT_NO_ALLOCATION(arena.run(key, [&] { out = model->forward(x); }));
//
//   int main(int argc, char** argv) {            // every test in the binary
//     ::testing::InitGoogleTest(&argc, argv);
//     memseal::testing::installNoLeakListener();
//     return RUN_ALL_TESTS();
//   }
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "memseal/scope.h"

namespace memseal::testing {

inline ScopeOptions quietScopeOptions() {
  ScopeOptions options;
  options.on_survivors = ReportPolicy::kNone;
  return options;
}

// Opens a lifetime scope when each test starts and fails the test if anything it made is alive
// when it ends (after TearDown). Installed ahead of GoogleTest's printer, so the verdict it prints
// already includes the failure.
class NoLeakListener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override {
    scope_ = std::make_unique<LifetimeScope>(
        std::string(info.test_suite_name()) + "." + info.name(), quietScopeOptions());
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    if (!scope_) return;
    ScopeReport report = scope_->close();
    scope_.reset();
    if (!report.clean())
      ADD_FAILURE() << "tensors made by this test are still alive:\n" << report.toText();
  }

 private:
  std::unique_ptr<LifetimeScope> scope_;
};

inline void installNoLeakListener() {
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  ::testing::TestEventListener* printer = listeners.Release(listeners.default_result_printer());
  listeners.Append(new NoLeakListener());
  if (printer != nullptr) listeners.Append(printer);
}

}  // namespace memseal::testing

#define MEMSEAL_NO_LEAK_IMPL_(fail, ...)                                                      \
  do {                                                                                        \
    ::memseal::ScopeReport memseal_report_;                                                   \
    {                                                                                         \
      ::memseal::LifetimeScope memseal_scope_(#__VA_ARGS__,                                   \
                                              ::memseal::testing::quietScopeOptions());       \
      { __VA_ARGS__; }                                                                        \
      memseal_report_ = memseal_scope_.close();                                               \
    }                                                                                         \
    if (!memseal_report_.clean())                                                             \
      fail("Expected: " #__VA_ARGS__ " leaves no tensor alive\n" + memseal_report_.toText()); \
  } while (false)

#define MEMSEAL_GTEST_NONFATAL_(message) ADD_FAILURE() << (message)
#define MEMSEAL_GTEST_FATAL_(message) \
  return GTEST_MESSAGE_(std::string(message).c_str(), ::testing::TestPartResult::kFatalFailure)

// Fails the test (and goes on) if `statement` leaves any tensor it made alive.
#define EXPECT_NO_TENSOR_LEAK(...) MEMSEAL_NO_LEAK_IMPL_(MEMSEAL_GTEST_NONFATAL_, __VA_ARGS__)
// Fails the test and returns from the test function if `statement` leaves a tensor alive.
#define ASSERT_NO_TENSOR_LEAK(...) MEMSEAL_NO_LEAK_IMPL_(MEMSEAL_GTEST_FATAL_, __VA_ARGS__)

// Fails the test if `statement` makes any CPU allocation through the system allocator.
#define EXPECT_NO_ALLOCATION(...)                                                               \
  do {                                                                                          \
    std::int64_t memseal_allocations_ = 0;                                                      \
    {                                                                                           \
      ::memseal::NoAllocationScope memseal_no_allocation_;                                      \
      { __VA_ARGS__; }                                                                          \
      memseal_allocations_ = memseal_no_allocation_.allocations();                              \
    }                                                                                           \
    EXPECT_EQ(memseal_allocations_, 0) << "Expected: " #__VA_ARGS__ " makes no CPU allocation"; \
  } while (false)
