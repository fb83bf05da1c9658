// `memseal merge DIR|FILES...`: a distributed job's rank reports (memseal run's memseal-RUN/
// folder, or any memseal.check or memseal.explain reports) side by side: the verdict per rank,
// each cause matched across ranks ("all 4 ranks" or "rank 0 only"), the spread of their peaks,
// missing ranks. Exit codes as `memseal check`: 0 no leak on any rank, 1 a leak, 2 an input it
// cannot read, or reports of several jobs (other run ids) without --force.
#include <iostream>
#include <memory>

#include "cli/command_list.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/rank_reports.h"
#include "memseal/html.h"
#include "memseal/merged_report.h"

namespace memseal::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> inputs;
  OutputFlags output;
  bool force = false;
};

int runMerge(const MergeOptions& options) {
  if (!options.output.check("merge")) return kExitUsage;
  std::vector<std::string> files;
  std::string error;
  if (!rankReportFiles(options.inputs, &files, &error)) {
    std::cerr << "memseal merge: " << error << "\n";
    return kExitUsage;
  }
  std::vector<RankReport> ranks;
  for (const std::string& file : files) {
    RankReport rank;
    if (!readRankReport(file, &rank, &error)) {
      std::cerr << "memseal merge: " << error << "\n";
      return kExitUsage;
    }
    ranks.push_back(std::move(rank));
  }
  if (std::string why = otherJobs(ranks); !why.empty()) {
    if (!options.force) {
      std::cerr << "memseal merge: " << why << ", or --force to merge them anyway\n";
      return kExitUsage;
    }
    std::cerr << "memseal merge: " << why << "; merged anyway (--force)\n";
  }
  MergedReport merged = mergeRankReports(ranks);
  std::cout << merged.toText();
  bool written = options.output.json_path.empty() ||
                 writeOutput("merge", options.output.json_path, merged.toJson());
  HtmlPage page;
  page.merged = &merged;
  if (!options.output.html_path.empty()) {
    page.rank_pages = pageLinksFrom(options.output.html_path, rankPagesBesideReports(merged));
  }
  written = writeHtmlIfAsked("merge", options.output.html_path, "job of ranks", page) && written;
  if (!written) return kExitUsage;
  return merged.leak() ? kExitLeak : kExitOk;
}

}  // namespace

void addMergeCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<MergeOptions>();
  CLI::App* command = app.add_subcommand(
      "merge",
      "Put a distributed job's rank reports side by side: each cause across ranks, missing ranks, "
      "the spread of their peaks (exit 0: no leak, 1: leak, 2: unreadable)");
  command
      ->add_option("reports", options->inputs,
                   "A folder of rank reports (memseal run's memseal-RUN/) or report files")
      ->required();
  options->output.addTo(command, "Write the merged report as JSON (memseal.merged/1)");
  command->add_flag("--force", options->force,
                    "Merge reports of several jobs (other run ids) as if they were one");
  entries.push_back({command, [options] { return runMerge(*options); }});
}

}  // namespace memseal::cli
