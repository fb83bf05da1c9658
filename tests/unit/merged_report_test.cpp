// The merge of a distributed job's rank reports: causes matched across ranks, divergent ones,
// missing and duplicate ranks, the text, the JSON, the page with its links to each rank's page, and
// a rank's identity in its own report.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include <fstream>

#include "memseal/html.h"
#include "memseal/merged_report.h"

namespace memseal {
namespace {

LeakFinding finding(LeakCategory category, const std::string& op, const std::string& file, int line,
                    double bytes_per_step) {
  LeakFinding result;
  result.category = category;
  result.site.op = op;
  StackFrame frame;
  frame.function = "step";
  frame.file = file;
  frame.line = line;
  frame.library = "python";
  result.site.frames.push_back(frame);
  result.bytes_per_step = bytes_per_step;
  result.count_per_step = 1;
  result.retained = "tensor storage";
  result.hint = "keep less";
  return result;
}

RankReport rank(int number, int world_size, std::vector<LeakFinding> findings,
                std::int64_t peak = 1000) {
  RankReport entry;
  entry.identity = RankIdentity{number, number, world_size, "job"};
  entry.source = "rank-" + std::to_string(number) + ".json";
  LeakReport report;
  report.steps = 40;
  report.warmup = 5;
  report.findings = std::move(findings);
  report.leak = !report.findings.empty();
  report.per_step.push_back(StepSample{1, peak, 1, 0, 0, 0});
  report.rank = entry.identity;
  entry.report = report;
  return entry;
}

TEST(MergedReport, ReportsOfTwoJobsAreNamedWithTheirRunIds) {
  std::vector<RankReport> one_job = {rank(0, 2, {}), rank(1, 2, {})};
  EXPECT_EQ(otherJobs(one_job), "");
  RankReport other = rank(1, 2, {});
  other.identity.run_id = "yesterday";
  std::string why = otherJobs({rank(0, 2, {}), other});
  EXPECT_NE(why.find("the reports are of 2 jobs"), std::string::npos) << why;
  EXPECT_NE(why.find("run id yesterday: rank-1.json"), std::string::npos) << why;
  RankReport unnamed = rank(1, 2, {});
  unnamed.identity.run_id = "";  // no run id: of any job
  EXPECT_EQ(otherJobs({rank(0, 2, {}), unnamed}), "");
}

TEST(MergedReport, ACauseEveryRankHasIsOneFindingOfAllRanks) {
  std::vector<RankReport> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(rank(
        r, 4, {finding(LeakCategory::kTensorsRetained, "aten::mm", "/a/train.py", 12, 2048 + r)}));
  }
  MergedReport merged = mergeRankReports(ranks);
  ASSERT_EQ(merged.world_size, 4);
  ASSERT_EQ(merged.findings.size(), 1u);
  EXPECT_EQ(merged.findings[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(merged.findings[0].everyReportingRank);
  EXPECT_EQ(merged.findings[0].site, "/a/train.py:12");
  std::string text = merged.toText();
  EXPECT_NE(text.find("all 4 ranks, +2.0 KiB/step each"), std::string::npos) << text;
  EXPECT_NE(text.find("at        train.py:12"), std::string::npos) << text;
}

// A rank's line counts steps as the rank's own report does: after its warm-up.
TEST(MergedReport, ARanksStepsAreCountedAsItsOwnReportCountsThem) {
  std::vector<RankReport> ranks = {
      rank(0, 2, {finding(LeakCategory::kTensorsRetained, "aten::mm", "/a/train.py", 12, 64)}),
      rank(1, 2, {})};
  MergedReport merged = mergeRankReports(ranks);
  std::string own = ranks[0].report->toText();
  EXPECT_NE(own.find("in 35 steps after 5 warm-up steps"), std::string::npos) << own;
  std::string text = merged.toText();
  EXPECT_NE(text.find("rank 0: LEAK, 1 finding in 35 steps after 5 warm-up steps"),
            std::string::npos)
      << text;
  std::string json = merged.toJson();
  EXPECT_NE(json.find("\"warmup\": 5"), std::string::npos) << json;
}

TEST(MergedReport, LossesKeptWithTheirGraphsSayWhatTheGraphsCostInEveryView) {
  // A kept loss is 4 bytes of storage; its graph's nodes cost the process 9 KiB a step.
  LeakFinding kept =
      finding(LeakCategory::kAutogradGraphRetained, "aten::mean", "/a/train.py", 30, 4);
  kept.resident_bytes_per_step = 9 * 1024;
  kept.survivors = 295;
  kept.survivor_bytes = 295 * 4;
  MergedReport merged = mergeRankReports({rank(0, 2, {kept}), rank(1, 2, {})});
  std::string text = merged.toText();
  EXPECT_NE(text.find("rank 0 only, +4 B/step (1 tensor/step), resident memory +9.0 KiB/step"),
            std::string::npos)
      << text;
  LeakReport report = *rank(0, 1, {kept}).report;
  std::string rank_text = report.toText();
  EXPECT_NE(rank_text.find("+4 B/step, 1 tensor/step (295 retained, 1.2 KiB), resident memory "
                           "+9.0 KiB/step"),
            std::string::npos)
      << rank_text;
  // JSON keeps it, so `memseal report` and `memseal merge` say the same from the files.
  LeakReport read = LeakReport::fromJson(report.toJson());
  ASSERT_EQ(read.findings.size(), 1u);
  EXPECT_EQ(read.findings[0].resident_bytes_per_step, 9 * 1024);
  // Where the graphs cost no more than the storage, nothing is added.
  kept.resident_bytes_per_step = 2;
  EXPECT_EQ(mergeRankReports({rank(0, 1, {kept})}).toText().find("resident memory"),
            std::string::npos);
}

TEST(MergedReport, ThePageLinksEachRanksOwnPageAndSaysNothingOfCharts) {
  char folder_template[] = "/tmp/memseal-links-XXXXXX";
  ASSERT_NE(::mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  std::string job = folder + "/job 1";
  ASSERT_EQ(::mkdir(job.c_str(), 0700), 0);
  std::vector<RankReport> ranks = {
      rank(0, 2, {finding(LeakCategory::kAutogradGraphRetained, "aten::add_", "t.py", 7, 4)}),
      rank(1, 2, {})};
  // Rank 0's report has its page beside it, rank 1's has none.
  for (RankReport& entry : ranks) entry.source = job + "/" + entry.source;
  std::ofstream(job + "/rank-0.html") << "<html></html>";
  MergedReport merged = mergeRankReports(ranks);
  std::map<int, std::string> pages = rankPagesBesideReports(merged);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages.at(0), job + "/rank-0.html");
  // From a page in the job's folder, from one in the folder above it, and from one beside it.
  EXPECT_EQ(pageLinksFrom(job + "/merged.html", pages).at(0), "rank-0.html");
  std::map<int, std::string> links = pageLinksFrom(folder + "/merged.html", pages);
  EXPECT_EQ(links.at(0), "job%201/rank-0.html");
  EXPECT_EQ(pageLinksFrom(folder + "/other/merged.html", pages).at(0), "../job%201/rank-0.html");

  HtmlPage page;
  page.merged = &merged;
  page.rank_pages = links;
  std::string html = renderHtml(page);
  EXPECT_NE(html.find("<a href=\"job%201/rank-0.html\""), std::string::npos);
  EXPECT_EQ(html.find("href=\"rank-1"), std::string::npos);
  EXPECT_EQ(html.find("Hover over a chart"), std::string::npos);  // the merged view has none
  EXPECT_NE(html.find("one row per rank"), std::string::npos);
  LeakReport check = *ranks[0].report;
  HtmlPage with_chart;
  with_chart.check = &check;
  EXPECT_NE(renderHtml(with_chart).find("Hover over a chart"), std::string::npos);
  ::unlink((job + "/rank-0.html").c_str());
  ::rmdir(job.c_str());
  ::rmdir(folder.c_str());
}

TEST(MergedReport, ACauseOfOneRankIsDivergentAndTheOthersAreClean) {
  std::vector<RankReport> ranks = {
      rank(0, 3, {finding(LeakCategory::kAutogradGraphRetained, "aten::add_", "t.py", 7, 4)}),
      rank(1, 3, {}), rank(2, 3, {})};
  MergedReport merged = mergeRankReports(ranks);
  ASSERT_EQ(merged.findings.size(), 1u);
  EXPECT_FALSE(merged.findings[0].everyReportingRank);
  EXPECT_EQ(merged.ranks[1].status, RankStatus::kNoLeak);
  std::string text = merged.toText();
  EXPECT_NE(text.find("rank 0 only"), std::string::npos) << text;
  EXPECT_NE(text.find("divergent"), std::string::npos) << text;
  EXPECT_NE(text.find("LEAK: 1 cause on 1 of 3 ranks"), std::string::npos) << text;
}

TEST(MergedReport, WhatHoldsACauseIsNamedAsTheLowestRankThatNamesOneSaysAndSurvivesJson) {
  std::vector<RankReport> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(
        rank(r, 3, {finding(LeakCategory::kTensorsRetained, "aten::mm", "/a/train.py", 12, 64)}));
  }
  // Rank 0's report names no holder (its search found none); ranks 1 and 2 name theirs.
  ranks[1].report->holders = {{0, "list `losses` (global of train.py)", "global", 8, false}};
  ranks[2].report->holders = {{0, "dict `cache` (global of train.py)", "global", 8, false}};
  // Through the report's JSON, as `memseal merge` reads the ranks' files.
  LeakReport read_back = LeakReport::fromJson(ranks[1].report->toJson());
  ASSERT_EQ(read_back.holders.size(), 1u);
  EXPECT_EQ(read_back.holders[0].description, "list `losses` (global of train.py)");
  EXPECT_EQ(read_back.holders[0].tensors, 8u);
  EXPECT_NE(read_back.toText().find("kept by   list `losses` (global of train.py), holds 8 of"),
            std::string::npos)
      << read_back.toText();
  ranks[1].report = read_back;
  MergedReport merged = mergeRankReports(ranks);
  ASSERT_EQ(merged.findings.size(), 1u);
  EXPECT_EQ(merged.findings[0].holders,
            (std::vector<std::string>{"list `losses` (global of train.py)"}));
  EXPECT_EQ(merged.findings[0].holders_rank, 1);
  std::string text = merged.toText();
  EXPECT_NE(text.find("kept by   list `losses` (global of train.py) (on rank 1)"),
            std::string::npos)
      << text;
  nlohmann::json json = nlohmann::json::parse(merged.toJson());
  EXPECT_EQ(json["findings"][0]["holders"][0], "list `losses` (global of train.py)");
  EXPECT_EQ(json["findings"][0]["holders_rank"], 1);
}

TEST(MergedReport, AReportWhoseHolderNamesAFindingItDoesNotHaveIsRefused) {
  RankReport entry =
      rank(0, 1, {finding(LeakCategory::kTensorsRetained, "aten::mm", "t.py", 7, 64)});
  entry.report->holders = {{3, "list `kept`", "global", 1, false}};
  EXPECT_THROW(LeakReport::fromJson(entry.report->toJson()), std::invalid_argument);
}

TEST(MergedReport, TheSameOpAtAnotherLineIsAnotherCause) {
  std::vector<RankReport> ranks = {
      rank(0, 2, {finding(LeakCategory::kTensorsRetained, "aten::mm", "t.py", 7, 64)}),
      rank(1, 2, {finding(LeakCategory::kTensorsRetained, "aten::mm", "t.py", 9, 64)})};
  MergedReport merged = mergeRankReports(ranks);
  EXPECT_EQ(merged.findings.size(), 2u);
}

TEST(MergedReport, RanksThatNeverReportedOrLeftNoReportAreMissingWithWhy) {
  std::vector<RankReport> ranks = {rank(0, 4, {}), rank(2, 4, {})};
  RankReport killed;
  killed.identity = RankIdentity{1, 1, 4, "job"};
  killed.source = "pid 77";
  killed.missing_reason = "killed by SIGKILL";
  ranks.push_back(killed);
  MergedReport merged = mergeRankReports(ranks);
  ASSERT_EQ(merged.ranks.size(), 4u);
  EXPECT_EQ(merged.ranks[1].status, RankStatus::kMissing);
  EXPECT_EQ(merged.ranks[1].missing_reason, "killed by SIGKILL");
  EXPECT_EQ(merged.ranks[3].status, RankStatus::kMissing);
  EXPECT_NE(merged.ranks[3].missing_reason.find("never reported"), std::string::npos);
  EXPECT_FALSE(merged.leak());
  EXPECT_NE(merged.toText().find("2 missing"), std::string::npos) << merged.toText();
}

TEST(MergedReport, ReportsWithoutARankAreNumberedAndADuplicateRankIsNoted) {
  RankReport first = rank(0, 2, {});
  RankReport unnamed = rank(0, 2, {});
  unnamed.identity.world_size = 0;  // a report of no distributed job
  RankReport again = rank(0, 2, {});
  again.source = "again.json";
  MergedReport merged = mergeRankReports({first, unnamed, again});
  EXPECT_EQ(merged.world_size, 2);
  EXPECT_EQ(merged.ranks[1].status, RankStatus::kNoLeak);
  ASSERT_EQ(merged.notes.size(), 1u);
  EXPECT_NE(merged.notes[0].find("rank 0 reported twice"), std::string::npos);
}

TEST(MergedReport, PeaksThatDifferAreToldWithTheirSpread) {
  MergedReport merged = mergeRankReports({rank(0, 2, {}, 1000), rank(1, 2, {}, 2000)});
  std::string text = merged.toText();
  EXPECT_NE(text.find("rank 1 highest"), std::string::npos) << text;
  EXPECT_NE(text.find("(50% of the highest)"), std::string::npos) << text;
  MergedReport alike = mergeRankReports({rank(0, 2, {}, 1000), rank(1, 2, {}, 1010)});
  EXPECT_EQ(alike.toText().find("highest"), std::string::npos);
}

TEST(MergedReport, ManyRanksAreListedAsRanges) {
  std::vector<RankReport> ranks;
  for (int r = 0; r < 100; ++r) {
    std::vector<LeakFinding> findings;
    if (r % 10 < 3)
      findings.push_back(finding(LeakCategory::kTensorsRetained, "aten::mm", "t.py", 3, 8));
    ranks.push_back(rank(r, 100, findings));
  }
  std::string text = mergeRankReports(ranks).toText();
  EXPECT_NE(text.find("LEAK: ranks 0-2, 10-12, 20-22"), std::string::npos) << text;
  EXPECT_EQ(text.find("rank 57:"), std::string::npos);
}

TEST(MergedReport, JsonHasItsSchemaRanksAndFindings) {
  MergedReport merged = mergeRankReports(
      {rank(0, 2, {finding(LeakCategory::kTensorsRetained, "aten::mm", "t.py", 3, 8)}),
       rank(1, 2, {})});
  nlohmann::json json = nlohmann::json::parse(merged.toJson());
  EXPECT_EQ(json["schema"], "memseal.merged/1");
  EXPECT_EQ(json["verdict"], "leak");
  EXPECT_EQ(json["ranks"][1]["status"], "no_leak");
  EXPECT_EQ(json["findings"][0]["ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(json["findings"][0]["category"], "tensors-retained");
}

TEST(RankIdentity, ARanksReportSaysWhichRankItIsAndReadsBack) {
  RankReport entry = rank(1, 2, {});
  std::string json = entry.report->toJson();
  LeakReport back = LeakReport::fromJson(json);
  ASSERT_TRUE(back.rank.has_value());
  EXPECT_EQ(back.rank->rank, 1);
  EXPECT_EQ(back.rank->world_size, 2);
  EXPECT_EQ(back.rank->run_id, "job");
  EXPECT_NE(back.toText().find("memseal: rank 1 of 2"), std::string::npos);
  std::string wrong = json;
  wrong.replace(wrong.find("\"world_size\": 2"), 15, "\"world_size\": 1");
  EXPECT_THROW(LeakReport::fromJson(wrong), std::invalid_argument);
  // A job no merge could hold (its ranks' table is sized by the world size).
  std::string huge = json;
  huge.replace(huge.find("\"world_size\": 2"), 15, "\"world_size\": 1073741824");
  EXPECT_THROW(LeakReport::fromJson(huge), std::invalid_argument);
}

TEST(RankIdentity, ARankOfAJobAcrossMachinesSaysItsNodeAndTheMergeShowsIt) {
  RankReport entry = rank(1, 2, {});
  entry.identity.node = entry.report->rank->node = 1;
  entry.identity.nodes = entry.report->rank->nodes = 2;
  std::string json = entry.report->toJson();
  LeakReport back = LeakReport::fromJson(json);
  ASSERT_TRUE(back.rank.has_value());
  EXPECT_EQ(back.rank->node, 1);
  EXPECT_EQ(back.rank->nodes, 2);
  EXPECT_NE(back.toText().find("on node 1 of 2"), std::string::npos);
  std::string beyond = json;
  beyond.replace(beyond.find("\"node\": 1"), 9, "\"node\": 2");
  EXPECT_THROW(LeakReport::fromJson(beyond), std::invalid_argument);
  // A rank of one machine's job writes neither, as reports always did.
  EXPECT_EQ(rank(0, 2, {}).report->toJson().find("\"nodes\""), std::string::npos);

  RankReport other = rank(0, 2, {});
  other.identity.nodes = other.report->rank->nodes = 2;
  MergedReport merged = mergeRankReports({other, entry});
  EXPECT_NE(merged.toText().find("rank 1 (node 1): no leak"), std::string::npos) << merged.toText();
  nlohmann::json written = nlohmann::json::parse(merged.toJson());
  EXPECT_EQ(written["ranks"][1]["node"], 1);
  EXPECT_EQ(written["ranks"][0]["node"], 0);
  // A rank whose node is not known (it never reported) says none.
  other.identity.node = -1;
  other.report.reset();
  written = nlohmann::json::parse(mergeRankReports({other, entry}).toJson());
  EXPECT_FALSE(written["ranks"][0].contains("node"));
}

TEST(RankIdentity, ComesFromTheLaunchersVariables) {
  unsetenv("RANK");
  EXPECT_FALSE(rankFromEnvironment().has_value());
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("TORCHELASTIC_RUN_ID", "none", 1);
  std::optional<RankIdentity> identity = rankFromEnvironment();
  ASSERT_TRUE(identity.has_value());
  EXPECT_EQ(identity->rank, 3);
  EXPECT_EQ(identity->local_rank, 1);
  EXPECT_EQ(identity->world_size, 8);
  EXPECT_EQ(identity->run_id, "");  // torchrun's default id names no job
  EXPECT_EQ(identity->nodes, 1);    // no GROUP_WORLD_SIZE: one machine
  setenv("GROUP_RANK", "1", 1);
  setenv("GROUP_WORLD_SIZE", "2", 1);
  identity = rankFromEnvironment();
  ASSERT_TRUE(identity.has_value());
  EXPECT_EQ(identity->node, 1);
  EXPECT_EQ(identity->nodes, 2);
  setenv("RANK", "8", 1);  // not a rank of 8
  EXPECT_FALSE(rankFromEnvironment().has_value());
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "GROUP_RANK",
                           "GROUP_WORLD_SIZE"})
    unsetenv(name);
}

}  // namespace
}  // namespace memseal

namespace memseal {
namespace {

std::string explainJson(int rank, std::int64_t peak, std::int64_t activations) {
  return R"({"schema": "memseal.explain/1", "rank": {"rank": )" + std::to_string(rank) +
         R"(, "local_rank": 0, "world_size": 2, "run_id": ""}, "steps": 3, "warmup": 1,
            "peak_step": 2, "peak_bytes": )" +
         std::to_string(peak) +
         R"(, "roles": [{"role": "parameters", "bytes": 1000, "count": 2},
                      {"role": "activations", "bytes": )" +
         std::to_string(activations) + R"(, "count": 4}]})";
}

TEST(MergedReport, ExplainedPeaksOfEachRankGiveTheSpreadAndTheRoleThatDiffers) {
  std::vector<RankReport> ranks = {rankReportFromJson(explainJson(0, 3000, 1500), "a.json"),
                                   rankReportFromJson(explainJson(1, 6000, 4500), "b.json")};
  ASSERT_TRUE(ranks[1].peak.has_value());
  EXPECT_EQ(ranks[1].peak->top_role, "activations");
  MergedReport merged = mergeRankReports(ranks);
  EXPECT_EQ(merged.ranks[0].status, RankStatus::kExplained);
  EXPECT_FALSE(merged.leak());
  std::string text = merged.toText();
  EXPECT_NE(text.find("the peaks of 2 ranks explained"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 highest"), std::string::npos) << text;
  EXPECT_NE(text.find("the largest part of the difference is activations"), std::string::npos)
      << text;
  nlohmann::json json = nlohmann::json::parse(merged.toJson());
  EXPECT_EQ(json["ranks"][1]["explained_peak"]["peak_bytes"], 6000);
  EXPECT_EQ(json["ranks"][1]["status"], "explained");
}

TEST(MergedReport, ARankReportOfAnotherKindSaysWhatItIs) {
  EXPECT_THROW(rankReportFromJson(R"({"schema": "memseal.explain/2"})", "x"),
               std::invalid_argument);
  EXPECT_THROW(rankReportFromJson(R"({"schema": "memseal.explain/1"})", "x"),
               std::invalid_argument);
  EXPECT_THROW(rankReportFromJson("not json", "x"), std::invalid_argument);
  EXPECT_THROW(rankReportFromJson(R"({"schema": "memseal.fit/1"})", "x"), std::invalid_argument);
}

}  // namespace
}  // namespace memseal

namespace memseal {
namespace {

// Found by fuzz/targets/fuzz_reports.cpp: both used to escape the reader as something other than
// std::invalid_argument (an uncaught nlohmann::json::out_of_range) or as undefined behaviour.
TEST(ReportReader, NumbersAReportCannotHoldAreRefusedWithWhatIsWrong) {
  EXPECT_THROW(LeakReport::fromJson(R"({"schema": "memseal.check/1", "steps": 5E36870912})"),
               std::invalid_argument);
  LeakReport report;
  report.steps = 4;
  std::string json = report.toJson();
  for (const char* wrong : {"8.88889e+24", "-3", "4.5", "99999999999"}) {
    std::string text = json;
    text.replace(text.find("\"steps\": 4"), 10, std::string("\"steps\": ") + wrong);
    try {
      LeakReport::fromJson(text);
      ADD_FAILURE() << "read steps " << wrong;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("steps"), std::string::npos) << error.what();
    }
  }
  EXPECT_THROW(rankReportFromJson(R"({"schema": "memseal.explain/1", "peak_bytes": 1e30,
                                      "peak_step": 1})",
                                  "x"),
               std::invalid_argument);
}

}  // namespace
}  // namespace memseal
