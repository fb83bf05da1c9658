#include "cli/run_job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "cli/rank_reports.h"
#include "memseal/html.h"

namespace memseal::cli {

namespace {

// A job across machines: every rank this node did not see, missing, with where it is.
// `node_zero`: this is the node of rank 0, which gathers the others' reports.
void addRanksOfOtherNodes(std::vector<RankReport>& reports, bool node_zero) {
  const RankIdentity* job = nullptr;
  std::vector<bool> seen;
  for (const RankReport& report : reports) {
    if (report.identity.nodes < 2) continue;
    job = &report.identity;
    seen.resize(std::max<std::size_t>(seen.size(), report.identity.world_size), false);
    seen[report.identity.rank] = true;
  }
  if (job == nullptr) return;
  RankIdentity identity = *job;
  identity.node = -1;  // not known from here
  std::string nodes = std::to_string(identity.nodes);
  std::string why =
      node_zero ? "it ran on another of the job's " + nodes +
                      " nodes, and its report has not reached this one (rank 0 gathers them "
                      "through the job's store as it ends)"
                : "it ran on another of the job's " + nodes +
                      " nodes: the memseal of rank 0's node gathers every rank's report into its "
                      "own job folder";
  for (std::size_t rank = 0; rank < seen.size(); ++rank) {
    if (seen[rank]) continue;
    identity.rank = identity.local_rank = static_cast<int>(rank);
    reports.push_back(RankReport{identity, "", std::nullopt, std::nullopt, why});
  }
}

}  // namespace

std::vector<RankReport> readRankReports(const std::vector<RankProcess>& ranks) {
  std::vector<RankReport> reports;
  bool node_zero = false;
  for (const RankProcess& process : ranks) {
    // A rank this node ran (a gathered one names its host) on node 0.
    node_zero = node_zero || (process.host.empty() && process.missing_reason.empty() &&
                              process.identity.node == 0);
    RankReport rank;
    rank.identity = process.identity;
    rank.source =
        "pid " + std::to_string(process.pid) + (process.host.empty() ? "" : " on " + process.host);
    if (!process.missing_reason.empty()) {
      rank.source = "gathered by rank 0";
      rank.missing_reason = process.missing_reason;
    } else if (process.report_json.empty()) {
      rank.missing_reason = "pid " + std::to_string(process.pid) +
                            " ended before memseal could write its report: killed by SIGKILL, "
                            "or ended by _exit";
    } else {
      try {
        rank.report = LeakReport::fromJson(process.report_json);
        // Its own word on who it is (a gathered rank's local rank is only there).
        if (rank.report->rank) rank.identity = *rank.report->rank;
        if (!process.interim_age.empty()) {
          rank.report->origin.interim_age = process.interim_age;
          rank.report->origin.pid = process.pid;
        }
      } catch (const std::exception& error) {
        rank.missing_reason = "its report cannot be read: " + std::string(error.what());
      }
    }
    reports.push_back(std::move(rank));
  }
  addRanksOfOtherNodes(reports, node_zero);
  return reports;
}

namespace {

// rank-N, or rank-N.pidP for a second process that said it was rank N.
std::string rankFileStem(const RankProcess& process, std::vector<bool>& named) {
  std::string stem = "rank-" + std::to_string(process.identity.rank);
  if (named.size() <= static_cast<std::size_t>(process.identity.rank)) {
    named.resize(process.identity.rank + 1, false);
  }
  if (named[process.identity.rank]) return stem + ".pid" + std::to_string(process.pid);
  named[process.identity.rank] = true;
  return stem;
}

}  // namespace

std::string defaultJobFolder(const std::vector<RankProcess>& ranks) {
  for (const RankProcess& process : ranks) {
    if (!process.identity.run_id.empty()) {
      std::string id = process.identity.run_id;
      for (char& c : id) {
        if (c == '/' || c == '\0' || c == ' ') c = '_';
      }
      return "memseal-" + id;
    }
  }
  return "memseal-job-" + std::to_string(getpid());
}

bool holdsReports(const std::string& folder) {
  std::vector<std::string> files;
  std::string error;
  return rankReportFiles({folder}, &files, &error);
}

bool reportJob(const std::vector<RankProcess>& ranks, const std::string& chosen_folder,
               const OutputFlags& output, std::ostringstream& text, bool* any_leak) {
  // Another job's reports stay as they were: this one goes beside them (FOLDER-2, -3, ...).
  std::string folder = chosen_folder;
  for (int suffix = 2; holdsReports(folder); ++suffix) {
    folder = chosen_folder + "-" + std::to_string(suffix);
  }
  if (mkdir(folder.c_str(), 0777) != 0 && errno != EEXIST) {
    std::cerr << "memseal run: cannot make " << folder << ": " << std::strerror(errno) << "\n";
    return false;
  }
  std::vector<RankReport> reports = readRankReports(ranks);
  bool written = true;
  std::vector<bool> named;
  std::map<int, std::string> rank_pages;  // each rank's page, for the merged view's links
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    std::string stem = folder + "/" + rankFileStem(ranks[i], named);
    if (!reports[i].report) continue;
    // The rank's own JSON as it wrote it, unless memseal added to it (an interim report's note).
    const std::string& json =
        ranks[i].interim_age.empty() ? ranks[i].report_json : reports[i].report->toJson();
    written = writeOutput("run", stem + ".json", json) && written;
    HtmlPage page;
    page.title = "rank " + std::to_string(ranks[i].identity.rank);
    page.check = &*reports[i].report;
    written = writeOutput("run", stem + ".html", renderHtml(page)) && written;
    rank_pages.emplace(ranks[i].identity.rank, stem + ".html");
  }
  MergedReport merged = mergeRankReports(reports);
  *any_leak = *any_leak || merged.leak();
  std::string merged_text = merged.toText();
  std::string merged_json = merged.toJson();
  HtmlPage page;
  page.title = "job of " + std::to_string(merged.world_size) + " ranks";
  page.merged = &merged;
  page.rank_pages = pageLinksFrom(folder + "/merged.html", rank_pages);
  written = writeOutput("run", folder + "/merged.txt", merged_text) && written;
  written = writeOutput("run", folder + "/merged.json", merged_json) && written;
  written = writeOutput("run", folder + "/merged.html", renderHtml(page)) && written;
  if (!output.json_path.empty())
    written = writeOutput("run", output.json_path, merged_json) && written;
  if (!output.html_path.empty()) {
    page.rank_pages = pageLinksFrom(output.html_path, rank_pages);
    written = writeOutput("run", output.html_path, renderHtml(page)) && written;
  }
  text << merged_text << "memseal run: each rank's report in " << folder
       << "/ (rank-N.json, rank-N.html); the ranks merged in merged.txt, merged.json, merged.html "
          "(memseal merge "
       << folder << " prints it again)\n";
  return written;
}

}  // namespace memseal::cli
