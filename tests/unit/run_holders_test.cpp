// When `memseal run` searches a Python program's heap for what holds its leaks, and how the
// holders found follow their causes from report to report (inject/run_holders.h).
#include "inject/run_holders.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace memseal::inject {
namespace {

LeakFinding finding(LeakCategory category, const std::string& op) {
  LeakFinding finding;
  finding.category = category;
  finding.site.op = op;
  LeakPart part;
  part.storage_addresses = {4096, 8192};
  StackFrame frame;
  frame.file = "/home/user/train.py";
  frame.function = "train";
  frame.library = "python";
  part.site.frames = {frame};
  finding.site.frames = {frame};
  finding.parts = {part};
  return finding;
}

LeakReport leakOf(std::vector<LeakFinding> findings) {
  LeakReport report;
  report.leak = !findings.empty();
  report.findings = std::move(findings);
  return report;
}

// A search that names, for every finding it is asked about, "holder of <op>".
struct CountingSearch {
  int calls = 0;
  std::vector<std::string> requests;
  std::optional<std::string> operator()(const std::string& request) {
    ++calls;
    requests.push_back(request);
    nlohmann::json found = nlohmann::json::array();
    nlohmann::json findings = nlohmann::json::parse(request)["findings"];
    for (std::size_t i = 0; i < findings.size(); ++i) {
      if (findings[i]["category"] == "untracked-growth") continue;
      found.push_back({{"finding", i},
                       {"description", "list `kept` holding " + std::to_string(i)},
                       {"kind", "global"},
                       {"tensors", 3},
                       {"via_graph", false}});
    }
    return found.dump();
  }
};

TEST(RunHolders, ACauseIsSearchedForOnceAndItsHoldersFollowItToItsIndexInLaterReports) {
  CountingSearch search;
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakReport first = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  holders.attach(first, RunHolders::When::kNow);
  ASSERT_EQ(search.calls, 1);
  ASSERT_EQ(first.holders.size(), 1u);
  EXPECT_EQ(first.holders[0].finding, 0);
  EXPECT_EQ(first.holders[0].description, "list `kept` holding 0");
  EXPECT_EQ(first.holders[0].tensors, 3u);

  // A later report: a new cause first, the searched one second. Only the new one is searched
  // for; the first keeps what its own search found, at its new index.
  LeakReport later = leakOf({finding(LeakCategory::kAutogradGraphRetained, "aten::add"),
                             finding(LeakCategory::kTensorsRetained, "aten::mul")});
  holders.attach(later, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2);
  ASSERT_EQ(later.holders.size(), 2u);
  EXPECT_EQ(later.holders[0].finding, 0);
  EXPECT_EQ(later.holders[0].description, "list `kept` holding 0");
  EXPECT_EQ(later.holders[1].finding, 1);
  EXPECT_EQ(later.holders[1].description, "list `kept` holding 0");  // from the first search

  LeakReport again = later;
  again.holders.clear();
  holders.attach(again, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2) << "every cause was searched for already";
  EXPECT_EQ(again.holders.size(), 2u);
}

TEST(RunHolders, AsTheCodeEndsEveryCauseIsSearchedAgainAndAnEmptyAnswerKeepsTheEarlierHolder) {
  // A search that names whatever the request's first part's storage count says: a finding that
  // gathered parts since the first search is held by more than it was.
  int calls = 0;
  bool finds_nothing = false;
  RunHolders holders([&](const std::string& request) -> std::optional<std::string> {
    ++calls;
    nlohmann::json findings = nlohmann::json::parse(request)["findings"];
    nlohmann::json found = nlohmann::json::array();
    if (finds_nothing) return found.dump();
    std::size_t parts = findings[0]["parts"].size();
    found.push_back({{"finding", 0},
                     {"description", "list `kept` of " + std::to_string(parts) + " parts"},
                     {"kind", "global"},
                     {"tensors", 8},
                     {"via_graph", false}});
    return found.dump();
  });
  LeakReport early = leakOf({finding(LeakCategory::kTensorsRetained, "aten::relu")});
  holders.attach(early, RunHolders::When::kNow);
  ASSERT_EQ(calls, 1);
  LeakReport grown = early;
  grown.holders.clear();
  grown.findings[0].parts.push_back(grown.findings[0].parts[0]);  // the next layer's inputs
  holders.attach(grown, RunHolders::When::kNow);
  EXPECT_EQ(calls, 1) << "a cause already searched for is not looked for again while it runs";
  holders.attach(grown, RunHolders::When::kCodeEnded);
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(grown.holders.size(), 1u);
  EXPECT_EQ(grown.holders[0].description, "list `kept` of 2 parts");

  // Searched again and found nowhere (the function that held it has returned): the holder found
  // while it was held stays.
  finds_nothing = true;
  LeakReport ended = grown;
  ended.holders.clear();
  holders.attach(ended, RunHolders::When::kCodeEnded);
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(ended.holders.size(), 1u);
  EXPECT_EQ(ended.holders[0].description, "list `kept` of 2 parts");
}

TEST(RunHolders, OneOpsResultsKeptByTwoLinesKeepTheirOwnHolders) {
  CountingSearch search;
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakFinding first = finding(LeakCategory::kTensorsRetained, "aten::mul");
  LeakFinding second = first;
  second.site.frames[0].line = 42;
  LeakReport report = leakOf({first, second});
  holders.attach(report, RunHolders::When::kNow);
  ASSERT_EQ(report.holders.size(), 2u);
  EXPECT_EQ(report.holders[0].finding, 0);
  EXPECT_EQ(report.holders[0].description, "list `kept` holding 0");
  EXPECT_EQ(report.holders[1].finding, 1);
  EXPECT_EQ(report.holders[1].description, "list `kept` holding 1");
}

TEST(RunHolders, NoSearchWithoutALeakOrForResidentGrowthOrOncePythonHasFinalised) {
  CountingSearch search;
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakReport healthy;
  holders.attach(healthy, RunHolders::When::kNow);
  LeakReport resident = leakOf({finding(LeakCategory::kUntrackedGrowth, "")});
  holders.attach(resident, RunHolders::When::kNow);
  LeakReport at_exit = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  holders.attach(at_exit, RunHolders::When::kNever);
  EXPECT_EQ(search.calls, 0);
  EXPECT_TRUE(at_exit.holders.empty());
}

TEST(RunHolders, ASearchSoonAfterTheLastWaitsUntilItsTimeComes) {
  CountingSearch search;
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakReport first = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  holders.attach(first, RunHolders::When::kWhenDue);
  ASSERT_EQ(search.calls, 1);
  // Within a second of the last search, a report at a step boundary does not search again...
  LeakReport second = leakOf({finding(LeakCategory::kAutogradGraphRetained, "aten::add")});
  holders.attach(second, RunHolders::When::kWhenDue);
  EXPECT_EQ(search.calls, 1);
  EXPECT_TRUE(second.holders.empty());
  // ...and the report as the program's code ends does.
  holders.attach(second, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2);
  EXPECT_EQ(second.holders.size(), 1u);
}

TEST(RunHolders, WhatWasHeldAndFreedIsNotLookedForAtItsOldAddresses) {
  CountingSearch search;
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakFinding freed = finding(LeakCategory::kTensorsRetained, "aten::mul");
  freed.freed = HeldUntilFreed{};
  LeakFinding building = finding(LeakCategory::kTensorsRetained, "aten::add");
  building.freed = HeldUntilFreed{};
  building.freed->building_up = true;
  nlohmann::json request =
      nlohmann::json::parse(holderSearchRequest(leakOf({freed, building})))["findings"];
  EXPECT_TRUE(request[0]["parts"][0]["storage_addresses"].empty());
  EXPECT_EQ(request[1]["parts"][0]["storage_addresses"].size(), 2u);
  EXPECT_EQ(request[1]["frames"][0]["file"], "/home/user/train.py");
}

TEST(RunHolders, AFindingWithNothingToStartFromLeavesItsCauseToALaterSearch) {
  CountingSearch search;
  RunHolders holders([&](const std::string& request) { return search(request); });
  // Made after the function that held it returned: no storage left to follow.
  LeakFinding emptied = finding(LeakCategory::kTensorsRetained, "aten::mul");
  emptied.parts[0].storage_addresses.clear();
  LeakReport first = leakOf({emptied});
  holders.attach(first, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 0);
  LeakReport later = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  holders.attach(later, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 1);
  EXPECT_EQ(later.holders.size(), 1u);
  // A graph is looked for by its root's type, storage or not.
  LeakFinding graph = finding(LeakCategory::kAutogradGraphRetained, "aten::add");
  graph.parts[0].storage_addresses.clear();
  graph.tensor.grad_fn = "AddBackward0";
  LeakReport graphs = leakOf({graph});
  holders.attach(graphs, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2);
}

TEST(RunHolders, ASearchThatFailsOrAnswersWhatCannotBeReadIsSaidNotLost) {
  RunHolders failing([](const std::string&) -> std::optional<std::string> { return "not json"; });
  LeakReport report = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  failing.attach(report, RunHolders::When::kNow);
  ASSERT_EQ(report.holders.size(), 1u);
  EXPECT_EQ(report.holders[0].finding, -1);
  EXPECT_NE(report.holders[0].description.find("cannot read"), std::string::npos);
  EXPECT_NE(report.toText().find("note: the holder search gave"), std::string::npos)
      << report.toText();

  // A holder naming a finding the report does not have is kept as a line about the search, so
  // that the report stays one its reader takes.
  RunHolders wrong_index([](const std::string&) -> std::optional<std::string> {
    return R"([{"finding": 7, "description": "list `kept`", "kind": "global", "tensors": 1,
               "via_graph": false}])";
  });
  LeakReport indexed = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  wrong_index.attach(indexed, RunHolders::When::kNow);
  ASSERT_EQ(indexed.holders.size(), 1u);
  EXPECT_EQ(indexed.holders[0].finding, -1);
  EXPECT_NO_THROW(LeakReport::fromJson(indexed.toJson()));

  int calls = 0;
  RunHolders no_python([&](const std::string&) -> std::optional<std::string> {
    ++calls;
    return std::nullopt;
  });
  LeakReport again = leakOf({finding(LeakCategory::kTensorsRetained, "aten::mul")});
  no_python.attach(again, RunHolders::When::kNow);
  no_python.attach(again, RunHolders::When::kNow);
  EXPECT_TRUE(again.holders.empty());
  EXPECT_EQ(calls, 2) << "a search Python could not run is tried again";
}

// A search that names, for the one finding asked about, whatever `answer` says now (nothing when
// it is empty).
struct AnsweringSearch {
  std::string answer;
  int calls = 0;
  std::optional<std::string> operator()(const std::string&) {
    ++calls;
    nlohmann::json found = nlohmann::json::array();
    if (!answer.empty()) {
      found.push_back({{"finding", 0},
                       {"description", answer},
                       {"kind", "local"},
                       {"tensors", 1},
                       {"via_graph", false}});
    }
    return found.dump();
  }
};

TEST(RunHolders, ACauseFirstSearchedForEarlyIsSearchedForOnceMoreAndWhatThatFindsWins) {
  AnsweringSearch search{"tensor `x` (local of forward)"};
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakFinding kept = finding(LeakCategory::kGradEnabledInference, "aten::mean");
  LeakReport early = leakOf({kept});
  holders.attach(early, RunHolders::When::kEarly);
  ASSERT_EQ(search.calls, 1);
  ASSERT_EQ(early.holders.size(), 1u);
  EXPECT_EQ(early.holders[0].description, "tensor `x` (local of forward)");
  // Another early report does not search again; the next other one does, and its holders win.
  LeakReport second = leakOf({kept});
  holders.attach(second, RunHolders::When::kEarly);
  EXPECT_EQ(search.calls, 1);
  search.answer = "list `scores`";
  LeakReport later = leakOf({kept});
  holders.attach(later, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2);
  ASSERT_EQ(later.holders.size(), 1u);
  EXPECT_EQ(later.holders[0].description, "list `scores`");
  // Once looked for again, the cause is searched for no more.
  LeakReport last = leakOf({kept});
  holders.attach(last, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2);
}

TEST(RunHolders, ASecondLookThatFindsNothingKeepsWhatTheEarlySearchFound) {
  // What a short phase kept is freed by the time of the second look: the early holders stay.
  AnsweringSearch search{"list `outputs` (local of evaluate)"};
  RunHolders holders([&](const std::string& request) { return search(request); });
  LeakFinding kept = finding(LeakCategory::kGradEnabledInference, "aten::_log_softmax");
  LeakReport early = leakOf({kept});
  holders.attach(early, RunHolders::When::kEarly);
  search.answer.clear();
  LeakReport later = leakOf({kept});
  holders.attach(later, RunHolders::When::kNow);
  EXPECT_EQ(search.calls, 2);
  ASSERT_EQ(later.holders.size(), 1u);
  EXPECT_EQ(later.holders[0].description, "list `outputs` (local of evaluate)");
}

}  // namespace
}  // namespace memseal::inject
