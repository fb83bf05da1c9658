// GoogleTest support: one-line assertions that a statement leaves no tensor alive, and a listener
// that checks every test of a binary. Include after <gtest/gtest.h>.
//
//   EXPECT_NO_TENSOR_LEAK(model->forward(x));
//   ASSERT_NO_TENSOR_LEAK({ auto y = f(x); g(y); });
//   EXPECT_NO_ALLOCATION(arena.run(key, [&] { out = model->forward(x); }));
//   MEMSEAL_EXPECT_PEAK_BELOW("64MiB", out = model->forward(x));   // or a number of bytes
//   MEMSEAL_EXPECT_PEAK_WITHIN_BASELINE(train_step());   // held to $MEMSEAL_BASELINE_DIR
//
//   int main(int argc, char** argv) {            // every test in the binary
//     ::testing::InitGoogleTest(&argc, argv);
//     memseal::testing::installNoLeakListener();
//     return RUN_ALL_TESTS();
//   }
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "memseal/diff.h"
#include "memseal/explain.h"
#include "memseal/fit.h"
#include "memseal/html.h"
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

// The peak of tracked tensor memory while `body` runs once (explainPeak with one measured step and
// no warm-up), or why it could not be measured (another tracker runs: a peak is not measured inside
// a LifetimeScope or under installNoLeakListener).
struct MeasuredPeak {
  std::optional<PeakReport> report;
  std::string error;
};

inline MeasuredPeak measurePeak(const std::function<void()>& body) {
  if (trackingActive()) {
    return {std::nullopt,
            "memseal: a peak cannot be measured while another memseal tracker runs (a "
            "LifetimeScope, a LeakDetector, or installNoLeakListener's scope around each test)"};
  }
  ExplainOptions options;
  options.steps = 1;
  options.warmup = 0;
  return {explainPeak([&](int) { body(); }, options), ""};
}

inline std::optional<std::int64_t> budgetBytes(std::int64_t bytes) {
  return bytes > 0 ? std::optional<std::int64_t>(bytes) : std::nullopt;
}
inline std::optional<std::int64_t> budgetBytes(const char* text) { return parseByteSize(text); }
inline std::optional<std::int64_t> budgetBytes(const std::string& text) {
  return parseByteSize(text);
}

// Empty when the peak is within the budget; else the failure message.
inline std::string peakBudgetFailure(const char* statement, const std::string& budget_text,
                                     std::optional<std::int64_t> budget,
                                     const std::function<void()>& body) {
  if (!budget) return "memseal: the peak budget " + budget_text + " is not a size such as 64MiB";
  MeasuredPeak peak = measurePeak(body);
  if (!peak.report) return peak.error;
  if (peak.report->peak_bytes <= *budget) return "";
  return std::string("Expected: ") + statement + " peaks at most at " + budget_text + " (" +
         std::to_string(*budget) + " bytes)\n  Actual: " + std::to_string(peak.report->peak_bytes) +
         " bytes\n" + peak.report->toText();
}

// The baseline of the running test: $MEMSEAL_BASELINE_DIR/Suite.Name.json; empty when the variable
// is unset.
inline std::string baselinePathOfCurrentTest() {
  const char* directory = std::getenv("MEMSEAL_BASELINE_DIR");
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (directory == nullptr || *directory == '\0' || test == nullptr) return "";
  std::string name = std::string(test->test_suite_name()) + "." + test->name();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return std::string(directory) + "/" + name + ".json";
}

// Empty when the statement's peak is held by the test's baseline (or the baseline was written now:
// the first run, MEMSEAL_UPDATE_BASELINE=1, or no MEMSEAL_BASELINE_DIR, when nothing is compared);
// else the failure message with the diff. MEMSEAL_BASELINE_TOLERANCE: 5% when unset.
inline std::string baselineFailure(const char* statement, const std::function<void()>& body) {
  const char* tolerance_text = std::getenv("MEMSEAL_BASELINE_TOLERANCE");
  std::optional<double> tolerance = parseTolerance(tolerance_text ? tolerance_text : "5%");
  if (!tolerance) return "memseal: MEMSEAL_BASELINE_TOLERANCE is not a fraction such as 5%";
  MeasuredPeak peak = measurePeak(body);
  if (!peak.report) return peak.error;
  std::string path = baselinePathOfCurrentTest();
  if (path.empty()) return "";
  std::ifstream file(path, std::ios::binary);
  const char* update = std::getenv("MEMSEAL_UPDATE_BASELINE");
  if (!file || (update != nullptr && std::string(update) == "1")) {
    try {
      writeReportFile(path, peak.report->toJson());
    } catch (const std::exception& error) {
      return std::string("memseal: ") + error.what();
    }
    return "";
  }
  std::stringstream baseline;
  baseline << file.rdbuf();
  DiffOptions options;
  options.before_label = path;
  options.after_label = "this run";
  try {
    BaselineCheck held =
        checkAgainstBaseline(baseline.str(), peak.report->toJson(), *tolerance, options);
    if (held.passed) return "";
    std::string message =
        std::string("Expected: ") + statement + " held to its baseline\n" + held.summary + "\n";
    for (const std::string& failure : held.failures) message += "  " + failure + "\n";
    return message + "\n" + held.diff.toText();
  } catch (const std::invalid_argument& error) {
    return "memseal: the baseline " + path + " cannot be compared: " + error.what();
  }
}

}  // namespace memseal::testing

#define MEMSEAL_PEAK_BELOW_IMPL_(fail, budget, ...)                                            \
  do {                                                                                         \
    std::string memseal_failure_ = ::memseal::testing::peakBudgetFailure(                      \
        #__VA_ARGS__, #budget, ::memseal::testing::budgetBytes(budget), [&] { __VA_ARGS__; }); \
    if (!memseal_failure_.empty()) fail(memseal_failure_);                                     \
  } while (false)

#define MEMSEAL_BASELINE_IMPL_(fail, ...)                                        \
  do {                                                                           \
    std::string memseal_failure_ =                                               \
        ::memseal::testing::baselineFailure(#__VA_ARGS__, [&] { __VA_ARGS__; }); \
    if (!memseal_failure_.empty()) fail(memseal_failure_);                       \
  } while (false)

// Fails the test if the tracked tensor memory live at once while `statement` runs goes above
// `budget` (bytes, or text such as "64MiB"); the failure shows what the peak held.
#define MEMSEAL_EXPECT_PEAK_BELOW(budget, ...) \
  MEMSEAL_PEAK_BELOW_IMPL_(MEMSEAL_GTEST_NONFATAL_, budget, __VA_ARGS__)
#define MEMSEAL_ASSERT_PEAK_BELOW(budget, ...) \
  MEMSEAL_PEAK_BELOW_IMPL_(MEMSEAL_GTEST_FATAL_, budget, __VA_ARGS__)
// Holds `statement`'s peak to the test's baseline in $MEMSEAL_BASELINE_DIR (the first run writes
// it): fails when the peak grows by more than $MEMSEAL_BASELINE_TOLERANCE (5%), with the diff.
#define MEMSEAL_EXPECT_PEAK_WITHIN_BASELINE(...) \
  MEMSEAL_BASELINE_IMPL_(MEMSEAL_GTEST_NONFATAL_, __VA_ARGS__)

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
