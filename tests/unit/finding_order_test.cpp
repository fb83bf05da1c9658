// The order of a report's findings: costliest at its peak first, resident growth last, and tensors
// kept in few of their steps after a graph kept every step (most likely inputs that graph saved).
#include <gtest/gtest.h>

#include <vector>

#include "detect/finding_order.h"

namespace memseal::detect {
namespace {

LeakFinding finding(LeakCategory category, const char* retained, double bytes_per_step,
                    std::uint32_t steps_with_survivors, std::uint32_t steps_observed) {
  LeakFinding built;
  built.category = category;
  built.retained = retained;
  built.bytes_per_step = bytes_per_step;
  built.steps_with_survivors = steps_with_survivors;
  built.steps_observed = steps_observed;
  return built;
}

std::vector<double> bytesInOrder(const std::vector<LeakFinding>& findings) {
  std::vector<double> bytes;
  for (const LeakFinding& f : findings) bytes.push_back(f.bytes_per_step);
  return bytes;
}

TEST(FindingOrder, TensorsKeptInFewStepsComeAfterAGraphKeptEveryStep) {
  std::vector<LeakFinding> findings = {
      finding(LeakCategory::kUntrackedGrowth, "resident memory", 5000, 500, 500),
      finding(LeakCategory::kTensorsRetained, "tensor storage", 21, 562, 11458),
      finding(LeakCategory::kAutogradGraphRetained, "autograd graph nodes", 0, 511, 512),
      finding(LeakCategory::kTensorsRetained, "tensor storage", 100, 500, 500),
  };
  orderFindings(findings);
  EXPECT_EQ(bytesInOrder(findings), (std::vector<double>{100, 0, 21, 5000}));
}

TEST(FindingOrder, WithoutAGraphTheLargestComesFirst) {
  std::vector<LeakFinding> findings = {
      finding(LeakCategory::kTensorsRetained, "tensor storage", 10, 500, 500),
      finding(LeakCategory::kTensorsRetained, "tensor storage", 21, 40, 1000),
      finding(LeakCategory::kUntrackedGrowth, "resident memory", 5000, 500, 500),
  };
  orderFindings(findings);
  EXPECT_EQ(bytesInOrder(findings), (std::vector<double>{21, 10, 5000}));
}

TEST(FindingOrder, TensorsKeptInMostStepsKeepTheirPlaceBeforeAGraph) {
  std::vector<LeakFinding> findings = {
      finding(LeakCategory::kGradEnabledInference, "autograd graph nodes", 4, 300, 300),
      finding(LeakCategory::kTensorsRetained, "tensor storage", 64, 200, 300),
  };
  orderFindings(findings);
  EXPECT_EQ(bytesInOrder(findings), (std::vector<double>{64, 4}));
}

TEST(FindingOrder, ALongLeakOfSmallStepsComesBeforeAShortPassThatHeldMoreEachStep) {
  // Training keeps 100 KiB a step and holds 495 MiB now; an evaluation pass held 1 MiB a step for
  // 40 steps and freed it when it ended.
  LeakFinding training =
      finding(LeakCategory::kAutogradGraphRetained, "autograd graph nodes", 100 * 1024, 5000, 5000);
  training.survivor_bytes = 495LL << 20;
  LeakFinding evaluation =
      finding(LeakCategory::kGradEnabledInference, "autograd graph nodes", 1 << 20, 40, 40);
  evaluation.freed = HeldUntilFreed{};
  evaluation.freed->peak_bytes = 40LL << 20;
  std::vector<LeakFinding> findings = {evaluation, training};
  orderFindings(findings);
  EXPECT_EQ(bytesInOrder(findings), (std::vector<double>{100 * 1024, 1 << 20}));
  // Freed build-ups are weighed by their peak: a larger one comes first.
  evaluation.freed->peak_bytes = 600LL << 20;
  findings = {training, evaluation};
  orderFindings(findings);
  EXPECT_EQ(bytesInOrder(findings), (std::vector<double>{1 << 20, 100 * 1024}));
}

// A training leak keeping each loss with its graph: 4 bytes of storage a step, while malloc came
// to hold 1 GiB the steps freed between the kept graphs. That memory is the leak's: charged to it,
// it comes before an evaluation pass that kept 40 MiB, and its text says what it costs.
TEST(FindingOrder, FreedMemoryStrandedBetweenKeptGraphsIsTheirLeaksCost) {
  LeakFinding losses = finding(LeakCategory::kAutogradGraphRetained, "tensor storage", 4, 500, 500);
  losses.survivor_bytes = 2000;
  LeakFinding evaluation =
      finding(LeakCategory::kTensorsRetained, "tensor storage", 1 << 20, 40, 40);
  evaluation.survivor_bytes = 40 << 20;
  std::vector<LeakFinding> findings = {evaluation, losses};
  ASSERT_TRUE(chargeHeldFreeToKeptGraphs(std::int64_t{1} << 30, 500, findings));
  EXPECT_DOUBLE_EQ(findings[1].resident_bytes_per_step, static_cast<double>(1 << 30) / 500);
  EXPECT_DOUBLE_EQ(findings[0].resident_bytes_per_step, 0);
  orderFindings(findings);
  EXPECT_EQ(findings.front().category, LeakCategory::kAutogradGraphRetained);
}

TEST(FindingOrder, WithoutAKeptGraphFreedMemoryIsChargedToNoFinding) {
  LeakFinding kept = finding(LeakCategory::kTensorsRetained, "tensor storage", 4096, 500, 500);
  LeakFinding reset = finding(LeakCategory::kAutogradGraphRetained, "tensor storage", 4, 50, 50);
  reset.freed = HeldUntilFreed{};  // held for a while, then freed: its graphs are gone
  std::vector<LeakFinding> findings = {kept, reset};
  EXPECT_FALSE(chargeHeldFreeToKeptGraphs(std::int64_t{1} << 30, 500, findings));
  EXPECT_DOUBLE_EQ(findings[0].resident_bytes_per_step, 0);
  EXPECT_DOUBLE_EQ(findings[1].resident_bytes_per_step, 0);
}

}  // namespace
}  // namespace memseal::detect
