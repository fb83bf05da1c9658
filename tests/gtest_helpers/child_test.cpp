// A test binary that fails on purpose, run by gtest_helpers_test to prove that memseal's GoogleTest
// helpers fail when they should. Not run by ctest on its own.
#include <torch/torch.h>

#include <gtest/gtest.h>

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

TEST(Clean, EverythingFreed) {
  EXPECT_NO_TENSOR_LEAK(torch::ones({7}).sum());
  torch::Tensor local = torch::ones({5});
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (std::getenv("MEMSEAL_CHILD_LISTENER") != nullptr) memseal::testing::installNoLeakListener();
  return RUN_ALL_TESTS();
}
