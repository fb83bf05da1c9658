// The reports of a distributed job's ranks, read from files for `memseal merge` and for the merged
// view `memseal run` writes at the end of a job.
#pragma once

#include <string>
#include <vector>

#include "memseal/merged_report.h"

namespace memseal::cli {

// The report files among `inputs`: files as given; for a folder, its rank-*.json (or, where it has
// none, every *.json but merged.json), sorted. False, with `error` set, for an input that is
// neither, or a folder with no report.
bool rankReportFiles(const std::vector<std::string>& inputs, std::vector<std::string>* files,
                     std::string* error);

// One file as a rank's report (a leak check or an explained peak): its rank from the report's own
// "rank" (none: the merge numbers it). False, with `error` set, when it cannot be read.
bool readRankReport(const std::string& path, RankReport* rank, std::string* error);

}  // namespace memseal::cli
