// What the processes `memseal run` traced left in its session folder (run_processes.cpp).
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_job.h"
#include "memseal/leak_detector.h"

namespace memseal::cli {

// A traced process, from its status file.
struct TracedProcess {
  long pid = 0;
  long ppid = 0;
  std::string kind;
  std::string program;
  std::optional<RankIdentity> rank;  // a distributed job's rank
};

std::string readFile(const std::string& path);
// The traced processes of a session folder: the program first, then its children by pid.
std::vector<TracedProcess> tracedProcesses(const std::string& folder);
// How long ago `path` was written, for people ("3.2 s").
std::string ageOf(const std::string& path);
// The ranks of a distributed job among the traced processes (a rank's forked workers are not),
// with their reports.
std::vector<RankProcess> rankProcesses(const std::vector<TracedProcess>& processes,
                                       const std::string& session);
// The report file a traced process left: its final report, else the latest it streamed while it
// ran (then `interim_age` says how long before memseal read it); `json` is empty when it left none.
struct ProcessReportFile {
  std::string json;
  std::string interim_age;
  bool folder_full = false;  // no report, and the session folder has no space left
};
// Whether `folder`'s file system has too little space left for a report (a full disk).
bool folderIsFull(const std::string& folder);
ProcessReportFile readProcessReport(const std::string& session, long pid);
// That file read: the report (an interim one noted as such, in `text` and in its notes), or none,
// said in `text`.
std::optional<LeakReport> processReport(long pid, const ProcessReportFile& file,
                                        std::ostringstream& text);
// "memseal run: child pid P of PARENT (forked): PROGRAM", on a line of its own after an empty one.
std::string childHeading(const TracedProcess& child);
// A child whose final report found no leak (its outputs written), with what would be said of it.
struct QuietChild {
  TracedProcess process;
  std::string said;
};
// Those children: each said in full while they are few; past that, one line naming them, so a
// program with many healthy workers does not bury the report that matters.
void sayQuietChildren(const std::vector<QuietChild>& children, std::ostringstream& text);
// Children that left no report: each named while they are few; past that, one line, so a program
// that forks thousands of short-lived children does not bury its own report.
void sayChildrenWithoutReport(const std::vector<TracedProcess>& children, std::ostringstream& text);

}  // namespace memseal::cli
