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

TEST(RepeatingOps, OpsKnownToLoopInsideTheIterationNeverStartIt) {
  // A forward pass whose layer runs 12 times over its own output (ops 20, 21, 22) between a few
  // ops that run once: the layer's loop holds most of the ops; known to lie inside the step, its
  // ops are no anchor, and the iteration around it is found.
  std::vector<std::uint32_t> body = {1, 2, 3};
  for (int step = 0; step < 12; ++step) body.insert(body.end(), {20, 21, 22});
  body.insert(body.end(), {4, 5, 6, 7});
  std::vector<std::uint32_t> ops = loop({9}, body, 20);
  auto found = findLoop(ops, 8, {20, 21, 22});
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
  EXPECT_TRUE(found->anchor < 20) << found->anchor;
  // The inner loop alone is no loop once its ops may not start one.
  auto inner = findLoop(loop({}, {20, 21, 22}, 40), 8, {20, 21, 22});
  EXPECT_FALSE(inner.has_value());
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

// Iterations of `body`, with `extra` ops after every `every`-th one (a log line).
std::vector<std::uint32_t> loopWithLogLine(const std::vector<std::uint32_t>& body,
                                           const std::vector<std::uint32_t>& extra, int every,
                                           int iterations) {
  std::vector<std::uint32_t> ops;
  for (int i = 1; i <= iterations; ++i) {
    ops.insert(ops.end(), body.begin(), body.end());
    if (i % every == 0) ops.insert(ops.end(), extra.begin(), extra.end());
  }
  return ops;
}

TEST(FindLoop, FindsAnExactLoopAsFindRepeatingOpDoes) {
  std::vector<std::uint32_t> body = {1, 2, 1, 3, 4, 4, 5, 5};
  auto found = findLoop(loop({9, 9, 8}, body, 20), 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
  EXPECT_DOUBLE_EQ(found->coverage, 1.0);
  EXPECT_TRUE(found->anchor == 2 || found->anchor == 3) << found->anchor;
}

TEST(FindLoop, ALogLineEveryFewIterationsDoesNotHideTheLoop) {
  std::vector<std::uint32_t> body = {1, 2, 3, 4, 5, 6, 7, 5, 10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<std::uint32_t> ops = loopWithLogLine(body, {8, 9}, 5, 60);
  // Exactly periodic only as blocks of five iterations.
  auto exact = findRepeatingOp(ops, 8);
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->period, 5 * body.size() + 2);
  auto found = findLoop(ops, 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
  EXPECT_GE(found->coverage, 0.75);
  // Its signature is that of an iteration from its anchor on.
  std::size_t start = 0;
  while (body[start] != found->anchor) ++start;
  std::uint64_t hash = kEmptyOpsHash;
  for (std::size_t i = 0; i < body.size(); ++i)
    hash = foldOp(hash, body[(start + i) % body.size()]);
  EXPECT_EQ(found->signature, hash);
}

TEST(FindLoop, AFirstIterationUnlikeTheRestDoesNotHideTheLoop) {
  std::vector<std::uint32_t> body = {1, 2, 3, 4, 3};
  std::vector<std::uint32_t> ops = {1, 7, 2, 3, 4, 3, 8, 8};  // a one-off lazy initialisation
  std::vector<std::uint32_t> rest = loop({}, body, 40);
  ops.insert(ops.end(), rest.begin(), rest.end());
  auto found = findLoop(ops, 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
}

TEST(FindLoop, LayersInsideTheIterationAreNotTheLoop) {
  // Twelve identical layers (6, 7, 7) between an embedding (1) and a head (3, 4): the layers'
  // runs are alike, but every twelfth one also holds the head and the embedding.
  std::vector<std::uint32_t> body = {1};
  for (int layer = 0; layer < 12; ++layer) body.insert(body.end(), {6, 7, 7});
  body.insert(body.end(), {3, 4});
  auto found = findLoop(loop({}, body, 12), 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
  // With too few iterations for the loop, the layers are refused rather than taken.
  auto early = findLoop(loop({}, body, 4), 8);
  EXPECT_FALSE(early.has_value() && early->period == 3) << early->period;
}

TEST(FindLoop, TheIterationIsPreferredToABlockOfIterations) {
  // A log op (9) once every 10 iterations splits the ops into identical blocks of 10 iterations,
  // which hold every op; the iteration holds most of them and is the loop.
  std::vector<std::uint32_t> body = {1, 2, 3, 4, 5, 6, 7, 8, 10, 11};
  auto found = findLoop(loopWithLogLine(body, {9}, 10, 200), 8);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, body.size());
}

TEST(FindLoop, OpsThatMostlyDifferAreNoLoop) {
  std::vector<std::uint32_t> ops;
  for (int request = 0; request < 40; ++request) {
    ops.push_back(1);
    for (int token = 0; token < 3 + (request * 7) % 5; ++token) ops.push_back(2);
    ops.push_back(3);
  }
  EXPECT_FALSE(findLoop(ops, 4).has_value());
  EXPECT_FALSE(findLoop({}, 4).has_value());
  EXPECT_FALSE(findLoop(loop({}, {1, 2, 3}, 5), 8).has_value());
}

// An iteration: op 1, then the unit {2, 3} run `steps` times, then op 4, then the unit {5, 6, 7}
// run `steps` times (a recurrent model's time steps forward and backward), then {8, 8, 8} (a
// parameter update over three parameters: always three times).
std::vector<std::uint32_t> recurrent(const std::vector<int>& lengths) {
  std::vector<std::uint32_t> ops;
  for (int steps : lengths) {
    ops.push_back(1);
    for (int t = 0; t < steps; ++t) ops.insert(ops.end(), {2, 3});
    ops.push_back(4);
    for (int t = 0; t < steps; ++t) ops.insert(ops.end(), {5, 6, 7});
    ops.insert(ops.end(), {8, 8, 8});
  }
  return ops;
}

TEST(VaryingRepeats, FindsTheUnitsRunAVaryingNumberOfTimes) {
  EXPECT_EQ(opsRepeatedAVaryingNumberOfTimes(recurrent({5, 9, 4, 7, 5, 9}), 16, 3, 3),
            (std::vector<std::uint32_t>{2, 3, 5, 6, 7}));
}

TEST(VaryingRepeats, UnitsRunAsOftenEachTimeAreNotVarying) {
  EXPECT_TRUE(opsRepeatedAVaryingNumberOfTimes(recurrent({6, 6, 6, 6, 6}), 16, 3, 3).empty());
  // Two lengths (a first iteration unlike the rest) are not enough.
  EXPECT_TRUE(opsRepeatedAVaryingNumberOfTimes(recurrent({4, 6, 6, 6, 6}), 16, 3, 3).empty());
  // Nor are runs shorter than the minimum repeats, or units longer than the longest period.
  EXPECT_TRUE(opsRepeatedAVaryingNumberOfTimes(recurrent({1, 2, 1, 2}), 16, 3, 3).empty());
  EXPECT_TRUE(opsRepeatedAVaryingNumberOfTimes(recurrent({5, 9, 4, 7}), 1, 3, 3).empty());
}

}  // namespace
}  // namespace memseal::analyze
