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
// The report a traced process left: its final one, else the latest it streamed while it ran
// (marked so, `*interim`), else none (said in `text`). `*json` is the file as read.
std::optional<LeakReport> processReport(const std::string& session, long pid,
                                        std::ostringstream& text, std::string* json, bool* interim);
// A child that wrote no report at all (neither final nor interim): one that ended at once, as the
// children of a program that forks many do.
bool leftNoReport(const std::string& session, long pid);
// Children that left no report: each named while they are few; past that, one line, so a program
// that forks thousands of short-lived children does not bury its own report.
void sayChildrenWithoutReport(const std::vector<TracedProcess>& children, std::ostringstream& text);

}  // namespace memseal::cli
