// How `memseal run` tells the program's teardown from its loop when it chooses the report to give
// at exit, and that choice (detect/program_end.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "detect/program_end.h"

namespace {

using memseal::detect::BoundaryReport;
using memseal::detect::kSettledSteps;
using memseal::detect::lastBeforeTeardown;
using memseal::detect::madeDuringTeardown;
using memseal::detect::ProgramCodeEnded;
using memseal::detect::ProgramEnd;
using memseal::detect::reportAtExit;
using memseal::detect::samplesUpTo;
using memseal::detect::teardownFrom;

// A report whose steps (numbered from 100) held `live` tracked bytes each.
memseal::LeakReport reportOf(const std::vector<std::int64_t>& live) {
  memseal::LeakReport report;
  for (std::size_t i = 0; i < live.size(); ++i) {
    memseal::StepSample sample;
    sample.step = static_cast<std::uint32_t>(100 + i);
    sample.live_bytes = live[i];
    report.per_step.push_back(sample);
  }
  return report;
}

// Tracked memory that grows over `steps` steps, by a little more on every third.
std::vector<std::int64_t> rising(std::size_t steps) {
  std::vector<std::int64_t> live;
  for (std::size_t i = 0; i < steps; ++i) live.push_back(1'000'000 + 20'000 * i + 5'000 * (i % 3));
  return live;
}

TEST(TeardownFrom, MemoryFreedAfterTheLastBoundaryFallsFromTheLastSample) {
  // The program freed what its loop kept after the last window ended: no sample shows it.
  EXPECT_EQ(teardownFrom(reportOf(rising(40)), 0), std::optional<std::uint32_t>(139));
  EXPECT_EQ(teardownFrom(reportOf(rising(40)), 1'800'000), std::nullopt);
}

TEST(TeardownFrom, MemoryFreedInTheLastStepsFallsFromWhereItWasHighest) {
  std::vector<std::int64_t> live = rising(40);
  live.back() = 10'000;
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::optional<std::uint32_t>(138));
  // Freed over three windows: from the highest sample before them.
  live[37] = 1'600'000;
  live[38] = 1'200'000;
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::optional<std::uint32_t>(136));
}

TEST(TeardownFrom, AFallThatBeganBeforeTheLastStepsIsFollowedBackToItsStart) {
  // Memory fell a little in the window before the last ones, then below half: the teardown began
  // there, and a report made in that window saw part of what the loop kept freed.
  std::vector<std::int64_t> live = rising(40);
  live[36] = live[35] - 400'000;
  live[37] = live[36] - 50'000;
  live[38] = 300'000;
  live[39] = 20'000;
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::optional<std::uint32_t>(135));
}

TEST(TeardownFrom, ATeardownSpreadOverSeveralWindowsIsOne) {
  // Short windows on a busy machine: the program's end freed what its loop kept over five of them.
  std::vector<std::int64_t> live = rising(40);
  live[35] = 1'650'000;
  live[36] = 800'000;
  live[37] = 550'000;
  live[38] = 250'000;
  live[39] = 160'000;
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::optional<std::uint32_t>(134));
  // Steps that allocated again after the fall: the program went on after it.
  live[38] = 700'000;
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::nullopt);
}

TEST(TeardownFrom, WhatFollowsTheEndOfAPythonProgramsOwnCodeIsTeardown) {
  // The loop's memory fell at step 130, then ten steps stayed low: by their number alone, the
  // program went on after the fall.
  std::vector<std::int64_t> live = rising(40);
  for (std::size_t i = 30; i < live.size(); ++i) live[i] = 10'000 + 1'000 * (i % 2);
  EXPECT_EQ(teardownFrom(reportOf(live), 0, std::nullopt), std::nullopt);
  // But the program's own code ended two steps after the fall (its atexit): the eight steps after
  // are the interpreter finalising, which a busy machine spreads over many short windows.
  memseal::detect::ProgramCodeEnded ended{132, 10'000};
  EXPECT_EQ(teardownFrom(reportOf(live), 0, ended), std::optional<std::uint32_t>(129));
  // Code that went on for ten steps after the fall is the program's, not its teardown.
  ended.steps = 140;
  EXPECT_EQ(teardownFrom(reportOf(live), 0, ended), std::nullopt);
}

TEST(TeardownFrom, MemoryFreedLongBeforeTheEndIsNot) {
  // A phase freed what it held and the program went on at that level: not the teardown.
  std::vector<std::int64_t> live = rising(40);
  for (std::size_t i = 20; i < live.size(); ++i) live[i] = 10'000;
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::nullopt);
  // Ten steps before the end, memory steady at its new level since.
  live = rising(40);
  for (std::size_t i = 30; i < live.size(); ++i) live[i] = 10'000 + 1'000 * (i % 2);
  EXPECT_EQ(teardownFrom(reportOf(live), 0), std::nullopt);
}

TEST(TeardownFrom, TooFewStepsToSay) {
  EXPECT_EQ(teardownFrom(reportOf({1'000'000, 1'000'000, 1'000'000}), 0), std::nullopt);
}

TEST(MadeDuringTeardown, AReportMadeWhileTheLoopsMemoryWasFreedIsNotKept) {
  EXPECT_FALSE(madeDuringTeardown(3'000'000, 3'100'000, 3'000'000));
  // Freed while the report was made, or before it.
  EXPECT_TRUE(madeDuringTeardown(3'000'000, 200'000, 3'000'000));
  EXPECT_TRUE(madeDuringTeardown(200'000, 200'000, 3'000'000));
  // Half of the most seen is still the loop's level.
  EXPECT_FALSE(madeDuringTeardown(1'500'000, 1'500'000, 3'000'000));
}

// Boundary reports begun at these step counts, each done `length` boundaries later.
std::deque<BoundaryReport> reportsAt(const std::vector<std::uint64_t>& steps,
                                     std::uint64_t length) {
  std::deque<BoundaryReport> reports;
  for (std::uint64_t step : steps) {
    BoundaryReport report;
    report.steps = step;
    report.steps_after = step + length;
    reports.push_back(report);
  }
  return reports;
}

TEST(LastBeforeTeardown, TheNewestUnlessTheProgramToreDown) {
  EXPECT_EQ(lastBeforeTeardown({}, std::nullopt), nullptr);
  std::deque<BoundaryReport> reports = reportsAt({100, 120, 140, 160}, 2);
  EXPECT_EQ(lastBeforeTeardown(reports, std::nullopt), &reports.back());
}

TEST(LastBeforeTeardown, TheNewestDoneBeforeTheFallBegan) {
  std::deque<BoundaryReport> reports = reportsAt({100, 120, 140, 160}, 2);
  // The fall began from sample 161: the report done at boundary 162 may have seen it.
  EXPECT_EQ(lastBeforeTeardown(reports, 161u), &reports[2]);
  EXPECT_EQ(lastBeforeTeardown(reports, 162u), &reports[3]);
  EXPECT_EQ(lastBeforeTeardown(reports, 141u), &reports[1]);
  // None before it: the newest, as without a teardown.
  EXPECT_EQ(lastBeforeTeardown(reports, 50u), &reports.back());
}

TEST(ProgramEnd, KeepsTheNewestReportsAndAnEarlierOneGetsItsSamplesBack) {
  ProgramEnd end;
  auto time = std::chrono::steady_clock::now();
  for (std::size_t steps : {20, 30, 35, 38, 39}) {
    std::vector<std::int64_t> live = rising(steps);
    ASSERT_NE(end.atStepBoundary(reportOf(live), live.back(), live.back(), steps, steps, time),
              nullptr);
  }
  ASSERT_EQ(end.reports().size(), ProgramEnd::kKeptReports);
  EXPECT_EQ(end.reports().back().report.per_step.size(), 39u);  // the newest keeps them all
  memseal::LeakReport earlier = end.reports().front().report;
  ASSERT_EQ(earlier.per_step.size(), 1u);
  EXPECT_EQ(earlier.per_step.back().step, 129u);
  std::vector<std::int64_t> live = rising(40);
  live.back() = 0;
  samplesUpTo(earlier, reportOf(live));
  ASSERT_EQ(earlier.per_step.size(), 30u);
  EXPECT_EQ(earlier.per_step.front().step, 100u);
  EXPECT_EQ(earlier.per_step.back().step, 129u);
  EXPECT_EQ(earlier.per_step.back().live_bytes, live[29]);
}

TEST(ProgramEnd, AReportMadeAsTheProgramToreDownIsNotKept) {
  ProgramEnd end;
  auto time = std::chrono::steady_clock::now();
  memseal::LeakReport first = reportOf(rising(20));
  memseal::StackFrame line;
  line.library = "python";
  line.function = "train";
  first.findings.push_back(memseal::LeakFinding{});
  first.findings.back().category = memseal::LeakCategory::kAutogradGraphRetained;
  first.findings.back().site.op = "aten::add";
  first.findings.back().site.frames = {line};
  // The first report is kept whatever memory did: there is nothing earlier to stand for the loop.
  ASSERT_NE(end.atStepBoundary(first, 3'000'000, 3'000'000, 20, 20, time), nullptr);
  // Memory freed while the next was made: the loop is over.
  EXPECT_EQ(end.atStepBoundary(reportOf(rising(21)), 3'000'000, 100'000, 21, 21, time), nullptr);
  ASSERT_EQ(end.reports().size(), 1u);
  // One made while Python finalises names no Python line: it takes the earlier report's.
  memseal::LeakReport later = reportOf(rising(22));
  later.findings.push_back(first.findings.back());
  later.findings.back().site.frames.clear();
  const memseal::LeakReport* kept = end.atStepBoundary(later, 2'000'000, 2'000'000, 22, 22, time);
  ASSERT_NE(kept, nullptr);
  ASSERT_EQ(kept->findings.size(), 1u);
  ASSERT_EQ(kept->findings[0].site.frames.size(), 1u);
  EXPECT_EQ(kept->findings[0].site.frames[0].function, "train");
}

// A finding of `category` at `op`.
memseal::LeakFinding finding(memseal::LeakCategory category, const std::string& op) {
  memseal::LeakFinding f;
  f.category = category;
  f.site.op = op;
  return f;
}

// A boundary report of 60 steps that saw a leak from step `detected_at` on, taken 250 ms before the
// end.
std::deque<BoundaryReport> leakReportAt(std::uint32_t detected_at,
                                        std::chrono::steady_clock::time_point end) {
  BoundaryReport earlier;
  earlier.report = reportOf(rising(60));
  earlier.report.steps = 60;
  earlier.report.leak = true;
  earlier.report.detected_at_step = detected_at;
  earlier.report.findings.push_back(
      finding(memseal::LeakCategory::kAutogradGraphRetained, "aten::add"));
  earlier.report.findings.push_back(finding(memseal::LeakCategory::kUntrackedGrowth, ""));
  earlier.time = end - std::chrono::milliseconds(250);
  earlier.steps = 60;
  earlier.steps_after = 60;
  return {earlier};
}

TEST(ReportAtExit, TheEarlierLeakWhenTheReportAtExitLostIt) {
  auto end = std::chrono::steady_clock::now();
  std::deque<BoundaryReport> reports = leakReportAt(20, end);
  memseal::LeakReport now = reportOf(rising(62));  // the program freed what it kept: no leak
  now.steps = 62;
  memseal::LeakReport given = reportAtExit(now, reports, std::nullopt, end);
  EXPECT_TRUE(given.leak);
  ASSERT_EQ(given.findings.size(), 2u);
  EXPECT_EQ(given.origin.taken_after_step, std::optional<std::uint32_t>(60));
  EXPECT_EQ(given.origin.ms_before_end, 250);
  std::vector<std::string> notes = given.noteLines();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.front().find("taken after step 60, 250 ms before the program ended"),
            std::string::npos)
      << notes.front();
  // No earlier report, or one without a leak: the report at exit.
  EXPECT_FALSE(reportAtExit(now, {}, std::nullopt, end).leak);
  reports.front().report.leak = false;
  EXPECT_FALSE(reportAtExit(now, reports, std::nullopt, end).leak);
}

TEST(ReportAtExit, AVerdictOfTheLastFewStepsIsNotWhatTheLoopKept) {
  auto end = std::chrono::steady_clock::now();
  memseal::LeakReport now = reportOf(rising(62));
  EXPECT_FALSE(
      reportAtExit(now, leakReportAt(60 - kSettledSteps + 1, end), std::nullopt, end).leak);
  EXPECT_TRUE(reportAtExit(now, leakReportAt(60 - kSettledSteps, end), std::nullopt, end).leak);
}

TEST(ReportAtExit, TheReportAtExitWhenItKeptEveryCauseOrJudgedAPhase) {
  auto end = std::chrono::steady_clock::now();
  std::deque<BoundaryReport> reports = leakReportAt(20, end);
  memseal::LeakReport kept = reportOf(rising(62));
  kept.leak = true;
  // The same cause, without the resident growth: nothing lost.
  kept.findings.push_back(finding(memseal::LeakCategory::kAutogradGraphRetained, "aten::add"));
  kept.notes.push_back("as at exit");
  memseal::LeakReport given = reportAtExit(kept, reports, std::nullopt, end);
  ASSERT_EQ(given.notes.size(), 1u);
  EXPECT_EQ(given.notes[0], "as at exit");
  EXPECT_FALSE(given.origin.taken_after_step);
  // A build-up held and freed (a phase's), with no teardown seen: the detector judged it.
  memseal::LeakReport phases = reportOf(rising(62));
  phases.leak = true;
  phases.findings.push_back(finding(memseal::LeakCategory::kTensorsRetained, "aten::mul"));
  phases.findings.back().freed = memseal::HeldUntilFreed{};
  EXPECT_EQ(reportAtExit(phases, reports, std::nullopt, end).findings[0].site.op, "aten::mul");
  // ... but where time windows saw the program tear down, what it lost as it did counts.
  EXPECT_EQ(reportAtExit(phases, reports, 150u, end).findings[0].site.op, "aten::add");
  // A build-up judged no leak (a phase's tensors without history, freed together) is a judged
  // phase too: the report at exit, without the earlier leak.
  memseal::LeakReport noted = reportOf(rising(62));
  noted.freed_build_ups.push_back(finding(memseal::LeakCategory::kTensorsRetained, "aten::cat"));
  noted.freed_build_ups.back().freed = memseal::HeldUntilFreed{};
  memseal::LeakReport given_noted = reportAtExit(noted, reports, std::nullopt, end);
  EXPECT_FALSE(given_noted.leak);
  EXPECT_EQ(given_noted.freed_build_ups.size(), 1u);
}

TEST(ProgramEnd, AtExitLooksForTheTeardownOnlyWhenTheStepsWereTimeWindows) {
  auto time = std::chrono::steady_clock::now();
  ProgramEnd end;
  BoundaryReport earlier = leakReportAt(20, time).front();
  ASSERT_NE(end.atStepBoundary(earlier.report, 2'000'000, 2'000'000, 60, 60, earlier.time),
            nullptr);
  // A build-up the detector judged (held and freed) at exit, where the program freed everything.
  memseal::LeakReport phases = reportOf(rising(62));
  phases.leak = true;
  phases.findings.push_back(finding(memseal::LeakCategory::kTensorsRetained, "aten::mul"));
  phases.findings.back().freed = memseal::HeldUntilFreed{};
  EXPECT_EQ(end.atExit(phases, end.loopEndedAt(phases, 0, /*time_windows=*/false), time)
                .findings[0]
                .site.op,
            "aten::mul");
  // Time windows went on as it tore down: what it lost then counts, and the loop's report stands.
  EXPECT_EQ(end.atExit(phases, end.loopEndedAt(phases, 0, /*time_windows=*/true), time)
                .findings[0]
                .site.op,
            "aten::add");
  // A Python program's own code ended with its memory freed: the same.
  end.codeEnded(ProgramCodeEnded{162, 0});
  EXPECT_EQ(end.atExit(phases, end.loopEndedAt(phases, 0, /*time_windows=*/true), time)
                .findings[0]
                .site.op,
            "aten::add");
  // It ended with memory where the loop had it: what fell after it (the interpreter finalising)
  // is not looked at, and no teardown is seen.
  end.codeEnded(ProgramCodeEnded{130, rising(62)[29]});
  EXPECT_EQ(end.atExit(phases, end.loopEndedAt(phases, 0, /*time_windows=*/true), time)
                .findings[0]
                .site.op,
            "aten::mul");
}

}  // namespace
