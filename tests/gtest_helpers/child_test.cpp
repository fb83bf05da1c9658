// A test binary that fails on purpose, run by gtest_helpers_test to prove that memseal's GoogleTest
// helpers fail when they should. Not run by ctest on its own.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

#include "memseal/gtest.h"

namespace {
std::vector<torch::Tensor> g_leaked;
}

TEST(Leaky, ExpectMacroFails) { EXPECT_NO_TENSOR_LEAK(g_leaked.push_back(torch::ones({7}))); }

TEST(Leaky, AssertMacroFailsAndStops) {
  ASSERT_NO_TENSOR_LEAK(g_leaked.push_back(torch::ones({9})));
  std::puts("REACHED-AFTER-ASSERT");
}

TEST(Leaky, AllocationMacroFails) { EXPECT_NO_ALLOCATION(torch::Tensor t = torch::ones({3})); }

TEST(Leaky, ListenerCatchesAPlainTest) { g_leaked.push_back(torch::ones({11})); }

// 4 MiB live at once, above a budget of 1 MiB.
TEST(Leaky, PeakAboveItsBudget) {
  MEMSEAL_EXPECT_PEAK_BELOW("1MiB", torch::Tensor big = torch::ones({1 << 20}); big.sum());
}

TEST(Peak, WithinItsBudget) { MEMSEAL_EXPECT_PEAK_BELOW(8 << 20, torch::ones({1024}).sum()); }

// MEMSEAL_CHILD_ELEMENTS floats live at once, held to the baseline in $MEMSEAL_BASELINE_DIR.
TEST(Peak, HeldToItsBaseline) {
  const char* elements = std::getenv("MEMSEAL_CHILD_ELEMENTS");
  std::int64_t count = elements != nullptr ? std::atoll(elements) : 1024;
  MEMSEAL_EXPECT_PEAK_WITHIN_BASELINE(torch::ones({count}).sum());
}

TEST(Clean, EverythingFreed) {
  EXPECT_NO_TENSOR_LEAK(torch::ones({7}).sum());
  torch::Tensor local = torch::ones({5});
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (std::getenv("MEMSEAL_CHILD_LISTENER") != nullptr) memseal::testing::installNoLeakListener();
  return RUN_ALL_TESTS();
}
