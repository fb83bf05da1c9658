// Stack capture: the caller's frame is in the stack, identical stacks are stored once, different
// call paths get different ids, and symbolization names the function.
#include "track/stack_capture.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "analyze/symbolize.h"

// Outside namespace memseal: frames in memseal:: count as memseal's own, not the user's.
__attribute__((noinline)) void captureFromA(memseal::track::CapturedStack& stack) {
  memseal::track::captureStack(stack, 0);
  asm volatile("" ::: "memory");  // keeps this frame from being a tail call
}
__attribute__((noinline)) void captureFromB(memseal::track::CapturedStack& stack) {
  memseal::track::captureStack(stack, 0);
  asm volatile("" ::: "memory");
}

namespace memseal::track {

// Names the parameter in test output ("libunwind", "glibc backtrace").
void PrintTo(Unwinder unwinder, std::ostream* out) { *out << unwinderName(unwinder); }

namespace {

// Every test runs with each unwinder; libunwind's is skipped where libunwind.so.8 is missing.
class StackCapture : public ::testing::TestWithParam<Unwinder> {
 protected:
  void SetUp() override {
    previous_ = currentUnwinder();
    if (selectUnwinder(GetParam()) != GetParam()) {
      selectUnwinder(previous_);
      GTEST_SKIP() << unwinderName(GetParam()) << " is not available in this process";
    }
  }
  void TearDown() override { selectUnwinder(previous_); }

 private:
  Unwinder previous_ = Unwinder::kGlibc;
};

TEST_P(StackCapture, SameCallPathIsStoredOnceOtherPathsApart) {
  StackTable table;
  CapturedStack first, second, other;
  CapturedStack* targets[2] = {&first, &second};
  // volatile: the loop must not be unrolled into two call sites with different return addresses
  // (its increment a statement of its own: C++20, libtorch 2.12's and later, deprecates `++i` on a
  // volatile).
  volatile int i = 0;
  while (i < 2) {
    captureFromA(*targets[i]);
    i = i + 1;
  }
  captureFromB(other);
  ASSERT_GT(first.depth, 2);
  std::uint32_t first_id = internStack(table, first);
  std::uint32_t second_id = internStack(table, second);
  std::uint32_t other_id = internStack(table, other);
  EXPECT_NE(first_id, 0u);
  // The loop calls captureFromA from the same return address both times.
  EXPECT_EQ(first_id, second_id);
  EXPECT_NE(first_id, other_id);
  EXPECT_EQ(table.at(first_id).depth, first.depth);
}

TEST_P(StackCapture, SymbolizesTheCallerByName) {
  CapturedStack stack;
  captureFromA(stack);
  std::uintptr_t addresses[kMaxStackFrames];
  for (int i = 0; i < stack.depth; ++i)
    addresses[i] = reinterpret_cast<std::uintptr_t>(stack.frames[i]);
  std::vector<StackFrame> frames = analyze::symbolizeStack(addresses, stack.depth);
  ASSERT_EQ(static_cast<int>(frames.size()), stack.depth);
  // Within the first frames: sanitizers' interceptor of backtrace() adds one of its own.
  auto caller = std::find_if(
      frames.begin(), frames.begin() + std::min<std::size_t>(3, frames.size()),
      [](const StackFrame& f) { return f.function.find("captureFromA") != std::string::npos; });
  ASSERT_NE(caller, frames.begin() + std::min<std::size_t>(3, frames.size()));
  // Nothing intercepts unw_backtrace: the caller is exactly the first frame kept.
  if (GetParam() == Unwinder::kLibunwind) {
    EXPECT_EQ(caller, frames.begin());
  }
  EXPECT_FALSE(caller->is_internal);
  EXPECT_NE(caller->file.find("stack_capture_test.cpp"), std::string::npos) << caller->file;
  EXPECT_GT(caller->line, 0);
  // The frames above the caller are the test's own, as any user's code would be.
  auto test_body = std::find_if(caller, frames.end(), [](const StackFrame& f) {
    return f.function.find("SymbolizesTheCallerByName") != std::string::npos;
  });
  EXPECT_NE(test_body, frames.end());
}

INSTANTIATE_TEST_SUITE_P(Unwinders, StackCapture,
                         ::testing::Values(Unwinder::kLibunwind, Unwinder::kGlibc),
                         [](const ::testing::TestParamInfo<Unwinder>& info) {
                           return info.param == Unwinder::kLibunwind ? "libunwind" : "glibc";
                         });

}  // namespace
}  // namespace memseal::track
