#include "analyze/repeating_ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace memseal::analyze {
namespace {

// `iterations` copies of `body` after a warm-up prefix.
std::vector<std::uint32_t> loop(const std::vector<std::uint32_t>& warmup,
                                const std::vector<std::uint32_t>& body, int iterations) {
  std::vector<std::uint32_t> ops = warmup;
  for (int i = 0; i < iterations; ++i) ops.insert(ops.end(), body.begin(), body.end());
  return ops;
}

TEST(RepeatingOps, FindsTheIterationOfATrainingLoopAfterItsWarmUp) {
  // linear, relu, linear, loss, then backward's mm, mm, add, and the optimizer's add: mm and add
  // run more than once per iteration, the rest once.
  std::vector<std::uint32_t> body = {1, 2, 1, 3, 4, 4, 5, 5};
  std::vector<std::uint32_t> ops = loop({9, 9, 8}, body, 20);
  auto found = findRepeatingOp(ops, 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
  EXPECT_GE(found->repeats, 8u);
  // Only ops 2 and 3 run once per iteration; the one found must be one of them.
  EXPECT_TRUE(found->op == 2 || found->op == 3) << found->op;
}

TEST(RepeatingOps, TakesTheWholeIterationWhenALayerRepeatsInsideIt) {
  // Four identical layers (6, 7) then a head (3): the layers repeat, but only the iteration holds
  // for the whole sequence.
  std::vector<std::uint32_t> body = {6, 7, 6, 7, 6, 7, 6, 7, 3};
  auto found = findRepeatingOp(loop({}, body, 12), 4);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
  EXPECT_EQ(found->op, 3u);
}

TEST(RepeatingOps, RefusesOpsThatDoNotRepeatExactly) {
  // A decoding loop: one step per generated token, a different number per request.
  std::vector<std::uint32_t> ops;
  for (int request = 0; request < 30; ++request) {
    ops.push_back(1);
    for (int token = 0; token < 3 + (request * 7) % 5; ++token) ops.push_back(2);
    ops.push_back(3);
  }
  EXPECT_FALSE(findRepeatingOp(ops, 4).has_value());
}

TEST(RepeatingOps, RefusesTooFewRepeatsAndPeriodsWithoutASingleOp) {
  std::vector<std::uint32_t> body = {1, 2, 3, 4};
  EXPECT_FALSE(findRepeatingOp(loop({}, body, 3), 8).has_value());
  EXPECT_TRUE(findRepeatingOp(loop({}, body, 16), 8).has_value());
  // Every op twice per period.
  EXPECT_FALSE(findRepeatingOp(loop({}, {1, 1, 2, 2, 1, 2}, 20), 4).has_value());
  EXPECT_FALSE(findRepeatingOp({}, 4).has_value());
  EXPECT_FALSE(findRepeatingOp({5}, 1).has_value());
}

TEST(RepeatingOps, ASequenceOfOneOpIsALoopOfOneOp) {
  auto found = findRepeatingOp(std::vector<std::uint32_t>(100, 7), 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, 1u);
  EXPECT_EQ(found->op, 7u);
}

}  // namespace
}  // namespace memseal::analyze
