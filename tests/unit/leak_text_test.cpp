// A report's first line says what was judged: a run too short to judge is never "no leak"; the
// lines under it where the steps came from.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "memseal/leak_detector.h"

namespace memseal {
namespace {

std::string firstLine(const LeakReport& report) {
  std::string text = report.toText();
  return text.substr(0, text.find('\n'));
}

TEST(LeakReportText, ARunThatEndsInItsWarmUpIsTooShortToJudge) {
  LeakReport report;
  report.steps = 2;
  report.warmup = 5;
  EXPECT_EQ(firstLine(report),
            "memseal: too few steps to judge: 2 steps, 2 of them warm-up; a leak is judged over at "
            "least 4 steps after the warm-up (run more steps, or fewer warm-up steps with "
            "--warmup)");
}

// A forked child cannot run more steps: its steps are the windows in which it used memory.
TEST(LeakReportText, AForkedChildTooShortToJudgeSaysWhyItTookFewSteps) {
  LeakReport report;
  report.steps = 1;
  report.warmup = 5;
  report.origin.forked_from_pid = 4242;
  std::string line = firstLine(report);
  EXPECT_EQ(line.rfind("memseal: too few steps to judge: 1 step, 1 of them warm-up", 0), 0u)
      << line;
  EXPECT_NE(line.find("a forked child's steps are the time windows in which it allocated or freed"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("--warmup"), std::string::npos) << line;
}

TEST(LeakReportText, ThreeStepsAfterTheWarmUpAreStillTooFew) {
  LeakReport report;
  report.steps = 8;
  report.warmup = 5;
  EXPECT_EQ(firstLine(report).rfind("memseal: too few steps to judge: 8 steps, 5 of them", 0), 0u)
      << firstLine(report);
}

TEST(LeakReportText, EnoughStepsWithoutALeakSayNoLeak) {
  LeakReport report;
  report.steps = 9;
  report.warmup = 5;
  EXPECT_EQ(firstLine(report), "memseal: no leak in 4 steps after 5 warm-up steps");
}

// An op made inside an optimizer's step is shown inside what the user called, not inside the
// profiler range's full name ("Optimizer.step#SGD.step").
TEST(LeakReportText, WhereTheStepsCameFromIsSaidUnderTheVerdictAndKeptInTheJson) {
  LeakReport report;
  report.steps = 9;
  report.warmup = 5;
  EXPECT_EQ(report.toText().find("steps:"), std::string::npos);  // the program's own step()
  EXPECT_EQ(nlohmann::json::parse(report.toJson()).count("steps_from"), 0u);
  report.steps_from = {
      "one step per call of SGD.step() (the program's optimizer), seen through "
      "PyTorch's hooks (9 steps)"};
  std::string text = report.toText();
  EXPECT_NE(text.find("\nsteps: one step per call of SGD.step()"), std::string::npos) << text;
  EXPECT_EQ(LeakReport::fromJson(report.toJson()).steps_from, report.steps_from);
}

TEST(LeakReportText, ThePhasesLineCountsEachPhasesSteps) {
  LeakReport report;
  report.steps = 60;
  report.warmup = 5;
  PhaseSummary outside;
  outside.name = "outside loops";
  outside.steps = 1;
  outside.runs = 1;
  PhaseSummary training;
  training.name = "calls (RNNModel)";
  training.steps = 59;
  training.runs = 2;
  training.backward_ran = true;
  report.phases = {outside, training};
  std::string text = report.toText();
  EXPECT_NE(
      text.find("phases: \"outside loops\" 1 step, no backward, \"calls (RNNModel)\" 59 steps "
                "in 2 runs\n"),
      std::string::npos)
      << text;
}

TEST(LeakReportText, AnOpInsideAProfilerRangeIsShownInsideWhatTheUserCalled) {
  LeakReport report;
  report.steps = 40;
  report.warmup = 5;
  report.leak = true;
  LeakFinding finding;
  finding.category = LeakCategory::kAutogradGraphRetained;
  finding.bytes_per_step = 32;
  finding.site.op = "aten::addmm";
  finding.site.outer_op = "Optimizer.step#SGD.step";
  report.findings.push_back(finding);
  std::string text = report.toText();
  EXPECT_NE(text.find("made by   aten::addmm (inside SGD.step)"), std::string::npos) << text;
  EXPECT_EQ(text.find("Optimizer.step#"), std::string::npos) << text;
}

}  // namespace
}  // namespace memseal
