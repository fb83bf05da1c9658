// Two reports compared (memseal/diff.h): each kind's splits add up to the peak's change with the
// thing that changed first; leak causes new, gone and changed; mismatched reports refused; every
// report version memseal has written read; the baseline's verdict and its one line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "memseal/diff.h"
#include "memseal/explain.h"
#include "memseal/fit.h"
#include "memseal/merged_report.h"

namespace memseal {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

AllocationSite siteAt(const std::string& op, const std::string& file, int line) {
  AllocationSite site;
  site.op = op;
  StackFrame frame;
  frame.function = "forward";
  frame.file = file;
  frame.line = line;
  site.frames.push_back(frame);
  return site;
}

// A step's peak: parameters, activations of two modules made at two lines, a temporary.
PeakReport peak(std::int64_t encoder_activations, std::int64_t head_activations,
                std::int64_t temporaries = 1 * kMiB) {
  PeakReport report;
  report.steps = 4;
  report.warmup = 2;
  report.peak_step = 3;
  std::int64_t parameters = 8 * kMiB;
  report.peak_bytes = parameters + encoder_activations + head_activations + temporaries;
  for (int role = 0; role < kMemoryRoleCount; ++role) {
    RoleBytes bytes;
    bytes.role = static_cast<MemoryRole>(role);
    report.roles.push_back(bytes);
  }
  report.roles[0].bytes = parameters;
  report.roles[3].bytes = encoder_activations + head_activations;
  report.roles[4].bytes = temporaries;
  report.modules.push_back({"Net/encoder", encoder_activations, 4, {}});
  report.modules.push_back({"Net/head", head_activations, 2, {}});
  report.modules.push_back({"", parameters + temporaries, 3, {}});
  report.sites.push_back({siteAt("aten::addmm", "/work/model.py", 12),
                          MemoryRole::kActivations,
                          encoder_activations,
                          4,
                          {}});
  report.sites.push_back({siteAt("aten::relu", "/work/model.py", 20),
                          MemoryRole::kActivations,
                          head_activations,
                          2,
                          {}});
  report.sites.push_back(
      {siteAt("aten::empty", "/work/train.py", 7), MemoryRole::kParameters, parameters, 3, {}});
  // The temporaries' site is not listed (the lists keep the largest only): "(rest)" holds them.
  report.step_peaks = {{2, report.peak_bytes, 0, 0}, {3, report.peak_bytes, 0, 0}};
  report.timeline = {{0, 0}, {10, report.peak_bytes}, {20, 1000}};
  report.events_in_step = 20;
  return report;
}

std::int64_t sumOfChanges(const DiffBreakdown& breakdown) {
  std::int64_t sum = 0;
  for (const DiffEntry& entry : breakdown.entries) sum += entry.change();
  return sum;
}

const DiffBreakdown& breakdownOf(const ReportDiff& diff, const std::string& dimension) {
  for (const DiffBreakdown& breakdown : diff.breakdowns) {
    if (breakdown.dimension == dimension) return breakdown;
  }
  throw std::logic_error("no breakdown " + dimension);
}

TEST(ReportDiff, IdenticalPeaksAreAnEmptyDiff) {
  std::string json = peak(16 * kMiB, 4 * kMiB).toJson();
  ReportDiff diff = diffReports(json, json);
  EXPECT_EQ(diff.kind, "explain");
  EXPECT_TRUE(diff.empty());
  EXPECT_EQ(diff.peakChange(), 0);
  for (const DiffBreakdown& breakdown : diff.breakdowns) {
    EXPECT_TRUE(breakdown.entries.empty()) << breakdown.dimension;
  }
  EXPECT_NE(diff.toText().find("no change beyond the noise"), std::string::npos);
}

TEST(ReportDiff, AWiderModuleIsTheLargestLineOfEveryDimensionAndTheLinesAddUp) {
  ReportDiff diff = diffReports(peak(16 * kMiB, 4 * kMiB).toJson(),
                                peak(16 * kMiB, 12 * kMiB, 2 * kMiB).toJson());
  EXPECT_FALSE(diff.empty());
  EXPECT_EQ(diff.peakChange(), 9 * kMiB);
  EXPECT_EQ(breakdownOf(diff, "role").entries.front().key, "activations");
  EXPECT_EQ(breakdownOf(diff, "module").entries.front().key, "Net/head");
  EXPECT_EQ(breakdownOf(diff, "line").entries.front().key, "/work/model.py:20");
  EXPECT_EQ(breakdownOf(diff, "op").entries.front().key, "aten::relu");
  for (const DiffBreakdown& breakdown : diff.breakdowns) {
    ASSERT_TRUE(breakdown.additive);
    EXPECT_EQ(sumOfChanges(breakdown), diff.peakChange()) << breakdown.dimension;
  }
  // The temporaries' growth is in no listed site: the rest of the line split.
  bool rest = false;
  for (const DiffEntry& entry : breakdownOf(diff, "line").entries) {
    rest = rest || (entry.key == "(rest)" && entry.change() == 1 * kMiB);
  }
  EXPECT_TRUE(rest);
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(diff.toJson());
  EXPECT_EQ(json.begin().key(), "schema");
  EXPECT_EQ(json["schema"], "memseal.diff/1");
  EXPECT_EQ(json["peak_change"], 9 * kMiB);
  EXPECT_EQ(json["after"]["timeline"].size(), 3u);
}

TEST(ReportDiff, APeakWithinItsOwnStepsSpreadIsNoChange) {
  PeakReport before = peak(16 * kMiB, 4 * kMiB);
  before.step_peaks[0].peak_bytes -= 64 * 1024;  // the runs' own steps move by 64 KiB
  PeakReport after = peak(16 * kMiB, 4 * kMiB, 1 * kMiB + 32 * 1024);
  ReportDiff diff = diffReports(before.toJson(), after.toJson());
  EXPECT_EQ(diff.noise_bytes, 64 * 1024);
  EXPECT_FALSE(diff.peakChanged());
  EXPECT_TRUE(diff.empty());
}

LeakFinding diffFinding(LeakCategory category, const std::string& op, const std::string& file,
                        int line, double bytes_per_step) {
  LeakFinding result;
  result.category = category;
  result.site = siteAt(op, file, line);
  result.bytes_per_step = bytes_per_step;
  result.retained = "tensor storage";
  result.hint = "keep a number: loss.item()";
  return result;
}

LeakReport check(std::vector<LeakFinding> findings, std::int64_t growth = 0) {
  LeakReport report;
  report.steps = 30;
  report.warmup = 5;
  report.leak = !findings.empty();
  report.findings = std::move(findings);
  for (std::uint32_t step = 0; step < 30; ++step) {
    report.per_step.push_back({step, 4 * kMiB + growth * step, 10, 0, 0, 0});
  }
  return report;
}

TEST(ReportDiff, ALeakCauseIsNewGoneOrChangedByCauseNotByFindingNumber) {
  LeakFinding kept =
      diffFinding(LeakCategory::kAutogradGraphRetained, "aten::add", "/w/train.py", 40, 4);
  LeakFinding cache =
      diffFinding(LeakCategory::kTensorsRetained, "aten::mm", "/w/train.py", 55, 4096);
  LeakFinding grown = cache;
  grown.bytes_per_step = 16384;
  ReportDiff diff =
      diffReports(check({cache}, 4096).toJson(), check({kept, grown}, 16384).toJson());
  ASSERT_EQ(diff.causes.size(), 2u);
  EXPECT_EQ(diff.causes[0].change, "new");
  EXPECT_EQ(diff.causes[0].category, "autograd-graph-retained");
  EXPECT_EQ(diff.causes[0].site, "/w/train.py:40");
  EXPECT_EQ(diff.causes[1].change, "grown");
  EXPECT_EQ(diff.newCauses(), 1u);

  ReportDiff fixed = diffReports(check({kept}).toJson(), check({}).toJson());
  ASSERT_EQ(fixed.causes.size(), 1u);
  EXPECT_EQ(fixed.causes[0].change, "gone");
  EXPECT_NE(fixed.toText().find("gone"), std::string::npos);

  LeakFinding noisy = cache;
  noisy.bytes_per_step = 4096 * 1.1;  // two runs of one leak measure its rate a little apart
  ReportDiff same = diffReports(check({cache}).toJson(), check({noisy}).toJson());
  EXPECT_EQ(same.causes[0].change, "same");
}

TEST(ReportDiff, ACauseIsKeptByWhatTheNewerReportNamesBesideALineAboutTheSearch) {
  LeakFinding kept =
      diffFinding(LeakCategory::kTensorsRetained, "aten::mm", "/w/train.py", 55, 4096);
  LeakReport newer = check({kept}, 4096);
  newer.holders = {{0, "list `outputs` (global of train.py)", "global", 8, false},
                   {-1, "the holder search failed: MemoryError: ", "unnamed", 0, false}};
  ReportDiff diff = diffReports(check({}).toJson(), newer.toJson());
  ASSERT_EQ(diff.causes.size(), 1u);
  EXPECT_EQ(diff.causes[0].holder, "list `outputs` (global of train.py)");
}

// A baseline made in one checkout, a run in another (CI's fresh clone): the same program, the
// same causes.
TEST(ReportDiff, OneProgramCheckedOutInTwoFoldersIsComparedCauseByCause) {
  LeakFinding here =
      diffFinding(LeakCategory::kTensorsRetained, "aten::mm", "/home/a/repo/train.py", 9, 64);
  LeakFinding there = here;
  there.site.frames[0].file = "/tmp/ci/repo/train.py";
  ReportDiff diff = diffReports(check({here}).toJson(), check({there}).toJson());
  ASSERT_EQ(diff.causes.size(), 1u);
  EXPECT_EQ(diff.causes[0].change, "same");
  EXPECT_TRUE(checkAgainstBaseline(check({here}).toJson(), check({there}).toJson(), 0.05).passed);
}

TEST(ReportDiff, ReportsOfTwoKindsOrTwoProgramsAreRefused) {
  std::string explained = peak(16 * kMiB, 4 * kMiB).toJson();
  std::string checked = check({}).toJson();
  EXPECT_THROW(diffReports(explained, checked), DiffRefused);
  try {
    diffReports(explained, checked);
  } catch (const DiffRefused& refused) {
    EXPECT_NE(std::string(refused.what()).find("two reports of one kind"), std::string::npos);
  }
  PeakReport other = peak(16 * kMiB, 4 * kMiB);
  for (PeakSite& site : other.sites) site.site.frames[0].file = "/elsewhere/other.py";
  EXPECT_THROW(diffReports(explained, other.toJson()), DiffRefused);
  // Code generated while the program ran (torch.compile's) is named anew each run: it does not
  // make two runs of one program look like two programs.
  PeakReport compiled = peak(16 * kMiB, 4 * kMiB);
  for (PeakSite& site : compiled.sites) site.site.frames[0].file = "/tmp/torchinductor_me/ab/c.py";
  compiled.sites[0].site.frames[0].file = "<eval_with_key>.16";
  EXPECT_NO_THROW(diffReports(explained, compiled.toJson()));
  DiffOptions force;
  force.force = true;
  ReportDiff forced = diffReports(explained, other.toJson(), force);
  ASSERT_FALSE(forced.warnings.empty());
  EXPECT_NE(forced.warnings[0].find("two programs"), std::string::npos);
  EXPECT_THROW(diffReports("{not json", explained), std::invalid_argument);
  EXPECT_THROW(diffReports(R"({"schema":"memseal.explain/2"})", explained), std::invalid_argument);
  EXPECT_THROW(diffReports(R"({"schema":"memseal.cuda_oom/1"})", explained), std::invalid_argument);
}

TEST(ReportDiff, OtherWarmupOrStepCountsAreNamed) {
  LeakReport longer = check({});
  longer.steps = 60;
  longer.warmup = 10;
  ReportDiff diff = diffReports(check({}).toJson(), longer.toJson());
  ASSERT_EQ(diff.warnings.size(), 2u);
  EXPECT_NE(diff.warnings[0].find("warm-up"), std::string::npos);
  EXPECT_NE(diff.warnings[1].find("30 and 60 steps"), std::string::npos);
}

TEST(ReportDiff, RunsThatTookTheirStepsDifferentlyAreNamed) {
  LeakReport by_loop = check({});
  by_loop.steps_from = {"300 steps in 1 loop found in the program's ops",
                        "loop 1: one step per call of aten::linear, the op that starts each of its "
                        "iterations (12 ops, found after 40 ops): 300 steps in 1 run"};
  LeakReport by_time = check({});
  by_time.steps_from = {"time windows of 5ms (--interval) (120 steps)"};
  ReportDiff diff = diffReports(by_loop.toJson(), by_time.toJson());
  ASSERT_EQ(diff.warnings.size(), 1u);
  EXPECT_NE(diff.warnings[0].find("one step per call of aten::linear, then time windows of 5ms"),
            std::string::npos)
      << diff.warnings[0];
  EXPECT_TRUE(diffReports(by_loop.toJson(), by_loop.toJson()).warnings.empty());
}

RankReport rankOf(int number, std::vector<LeakFinding> findings) {
  RankReport rank;
  rank.identity = RankIdentity{number, number, 2, "job"};
  rank.source = "rank-" + std::to_string(number) + ".json";
  rank.report = check(std::move(findings));
  return rank;
}

TEST(ReportDiff, AJobsCauseIsMatchedAcrossRanksAndItsRanksAreSaid) {
  LeakFinding kept = diffFinding(LeakCategory::kTensorsRetained, "aten::mm", "/w/ddp.py", 30, 512);
  MergedReport before = mergeRankReports({rankOf(0, {}), rankOf(1, {})});
  MergedReport after = mergeRankReports({rankOf(0, {kept}), rankOf(1, {})});
  ReportDiff diff = diffReports(before.toJson(), after.toJson());
  EXPECT_EQ(diff.kind, "merged");
  ASSERT_EQ(diff.causes.size(), 1u);
  EXPECT_EQ(diff.causes[0].change, "new");
  EXPECT_EQ(diff.causes[0].after_ranks, std::vector<int>{0});
  EXPECT_EQ(breakdownOf(diff, "rank").entries.size(), 2u);
  EXPECT_NE(diff.toText().find("new     tensors-retained  aten::mm at /w/ddp.py:30"),
            std::string::npos)
      << diff.toText();
}

// Documents as memseal's earlier releases wrote them: fields added later are absent.
TEST(ReportDiff, ReadsEveryReportVersionMemsealHasWritten) {
  const char* old_check = R"({"schema":"memseal.check/1","verdict":"no_leak","steps":10,
      "warmup":2,"detected_at_step":null,"backward_ran":false,"findings":[],
      "live_bytes":[1,2,3],"per_step":[{"step":0,"live_bytes":1,"live_count":1,
      "resident_bytes":0,"graph_nodes_alive":0}]})";
  EXPECT_EQ(diffReports(old_check, old_check).kind, "check");
  const char* old_explain = R"({"schema":"memseal.explain/1","steps":4,"warmup":2,"peak_step":3,
      "peak_bytes":100,"baseline_bytes":0,"end_bytes":0,"peak_live_count":1,"events_in_step":2,
      "peak_event":0,"roles":[{"role":"activations","bytes":100,"count":1}],"modules":[],
      "sites":[],"tensors":[],"timeline":[],"step_peaks":[],"notes":[]})";
  EXPECT_TRUE(diffReports(old_explain, old_explain).empty());
  const char* fit_v1 = R"({"schema":"memseal.fit/1","points":[{"size":1,"peak_bytes":10},
      {"size":2,"peak_bytes":20},{"size":4,"peak_bytes":40}],"model":"linear",
      "budget_bytes":100,"predicted_max_size":9})";
  FitReport fit = fitPeaks({{1, 10}, {2, 20}, {4, 40}}, [] {
    FitOptions options;
    options.budget_bytes = 100;
    options.margin = 0;
    return options;
  }());
  ReportDiff capacity = diffReports(fit_v1, fit.toJson());
  ASSERT_TRUE(capacity.capacity.has_value());
  EXPECT_EQ(capacity.capacity->before_largest_size, 9);
  EXPECT_EQ(capacity.capacity->after_largest_size, fit.largestSize());
  EXPECT_EQ(capacity.before_peak, 40);
  MergedReport merged = mergeRankReports({});
  EXPECT_EQ(diffReports(merged.toJson(), merged.toJson()).kind, "merged");
}

TEST(ReportDiff, AFitWhoseLargestSizeShrinksFailsItsBaseline) {
  FitOptions options;
  options.budget_bytes = 1000;
  options.margin = 0;
  FitReport before = fitPeaks({{1, 10}, {2, 20}, {4, 40}}, options);
  FitReport after = fitPeaks({{1, 20}, {2, 40}, {4, 80}}, options);
  BaselineCheck held = checkAgainstBaseline(before.toJson(), after.toJson(), 5.0);
  EXPECT_FALSE(held.passed);
  ASSERT_FALSE(held.failures.empty());
  EXPECT_NE(held.failures.back().find("largest size that fits fell"), std::string::npos);
}

TEST(Baseline, PeakGrowthBeyondTheToleranceOrANewCauseFails) {
  std::string baseline = peak(16 * kMiB, 4 * kMiB).toJson();
  BaselineCheck small =
      checkAgainstBaseline(baseline, peak(16 * kMiB, 4 * kMiB + kMiB / 2).toJson(), 0.05);
  EXPECT_TRUE(small.passed) << small.summary;
  EXPECT_NE(small.summary.find("no new leak cause: ok"), std::string::npos) << small.summary;
  BaselineCheck large = checkAgainstBaseline(baseline, peak(16 * kMiB, 8 * kMiB).toJson(), 0.05);
  EXPECT_FALSE(large.passed);
  EXPECT_NE(large.summary.find("FAILED"), std::string::npos);
  EXPECT_NE(large.failures[0].find("more than the 5.0% tolerance"), std::string::npos)
      << large.failures[0];

  LeakFinding kept = diffFinding(LeakCategory::kTensorsRetained, "aten::mm", "/w/train.py", 9, 64);
  BaselineCheck known = checkAgainstBaseline(check({kept}).toJson(), check({kept}).toJson(), 0.05);
  EXPECT_TRUE(known.passed);  // a cause the baseline has too is not new
  BaselineCheck fresh = checkAgainstBaseline(check({}).toJson(), check({kept}).toJson(), 0.05);
  EXPECT_FALSE(fresh.passed);
  EXPECT_NE(fresh.failures[0].find("tensors-retained (aten::mm at /w/train.py:9)"),
            std::string::npos);
}

TEST(Baseline, ToleranceIsAPercentOrAFraction) {
  EXPECT_DOUBLE_EQ(*parseTolerance("5%"), 0.05);
  EXPECT_DOUBLE_EQ(*parseTolerance("12.5 %"), 0.125);
  EXPECT_DOUBLE_EQ(*parseTolerance("0.05"), 0.05);
  EXPECT_DOUBLE_EQ(*parseTolerance("0"), 0.0);
  for (const char* bad : {"", "%", "-5%", "five", "5%%", " 5%", "1000%", "nan"}) {
    EXPECT_FALSE(parseTolerance(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace memseal
