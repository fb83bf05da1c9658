// `memseal run` on a distributed job (torchrun and the like): every rank's report under one folder
// (rank-N.json, rank-N.html) and the ranks merged (merged.txt, merged.json, merged.html), the
// merged text for the terminal.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "memseal/merged_report.h"

namespace memseal::cli {

// A traced process that is a rank, with its report as the runtime wrote it (empty: none).
struct RankProcess {
  long pid = 0;
  RankIdentity identity;
  std::string report_json;
  // Set where report_json is the latest report taken while the rank ran (it ended before its
  // final one): how long before memseal read it, "3.2 s".
  std::string interim_age;
  // A rank of another node, gathered by rank 0 (node_gather.h): the machine it ran on, or why no
  // report of it came.
  std::string host;
  std::string missing_reason;
};

// Each rank's report read (one it could not leave or that cannot be read: missing, with why; an
// interim one with its ReportOrigin's interim age), for mergeRankReports. In a job across machines,
// the ranks this node neither ran nor gathered are missing, with where they are.
std::vector<RankReport> readRankReports(const std::vector<RankProcess>& ranks);

// The folder a job's reports go to when the user named none: memseal-RUN_ID in the current folder,
// or memseal-job-PID (this memseal's pid) where the launcher gave no run id.
std::string defaultJobFolder(const std::vector<RankProcess>& ranks);

// Whether `folder` holds reports already (another job's): memseal run's --job-dir must not.
bool holdsReports(const std::string& folder);

// Writes each rank's report and the merged report into `folder` (made if missing; where it holds
// another job's reports, FOLDER-2, FOLDER-3, ... instead), and --json /
// --html of the merged report where `output` names them; appends the merged text and where the
// files are to `text`. False, with a message on stderr, when a file cannot be written.
bool reportJob(const std::vector<RankProcess>& ranks, const std::string& folder,
               const OutputFlags& output, std::ostringstream& text, bool* any_leak);

}  // namespace memseal::cli
