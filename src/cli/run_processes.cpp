// What the processes `memseal run` traced left in its session folder: their status files (which
// process, whose child, which rank) and their reports, final or streamed.
#include "cli/run_processes.h"
#include "cli/command_support.h"

#include <dirent.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/schemas.h"
#include "inject/run_protocol.h"

namespace memseal::cli {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

namespace {

// The names of the files of `folder` that end in `suffix` (and are longer than it), sorted.
std::vector<std::string> filesEndingWith(const std::string& folder, const std::string& suffix) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(folder.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.size() > suffix.size() && endsWith(name, suffix)) names.push_back(name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Each "key=value" line of `text` (run_protocol.h's files), in order; other lines are skipped.
template <typename Take>
void forEachSetting(const std::string& text, Take take) {
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::size_t equals = line.find('=');
    if (equals != std::string::npos) take(line.substr(0, equals), line.substr(equals + 1));
  }
}

}  // namespace

std::vector<TracedProcess> tracedProcesses(const std::string& folder) {
  std::vector<TracedProcess> processes;
  for (const std::string& name : filesEndingWith(folder, inject::kStatusSuffix)) {
    TracedProcess process;
    forEachSetting(readFile(folder + "/" + name),
                   [&](const std::string& key, const std::string& value) {
                     if (key == "pid") process.pid = std::strtol(value.c_str(), nullptr, 10);
                     if (key == "ppid") process.ppid = std::strtol(value.c_str(), nullptr, 10);
                     if (key == "kind") process.kind = value;
                     if (key == "program") process.program = value;
                     if (key == "rank") process.rank.emplace().rank = std::atoi(value.c_str());
                     if (key == "local_rank" && process.rank)
                       process.rank->local_rank = std::atoi(value.c_str());
                     if (key == "world_size" && process.rank)
                       process.rank->world_size = std::atoi(value.c_str());
                     if (key == "run_id" && process.rank) process.rank->run_id = value;
                     if (key == "node" && process.rank)
                       process.rank->node = std::atoi(value.c_str());
                     if (key == "nodes" && process.rank)
                       process.rank->nodes = std::max(1, std::atoi(value.c_str()));
                   });
    if (process.pid > 0) processes.push_back(process);
  }
  // The program first, then its children in the order they started (pids grow, mostly).
  std::sort(processes.begin(), processes.end(), [](const TracedProcess& a, const TracedProcess& b) {
    if ((a.kind == "root") != (b.kind == "root")) return a.kind == "root";
    return a.pid < b.pid;
  });
  return processes;
}

std::string ageOf(const std::string& path) {
  std::error_code error;
  auto written = std::filesystem::last_write_time(path, error);
  if (error) return "some time";
  auto age = std::filesystem::file_time_type::clock::now() - written;
  double seconds = std::chrono::duration<double>(age).count();
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::max(0.0, seconds));
  return text;
}

bool folderIsFull(const std::string& folder) {
  constexpr unsigned long long kTooLittleForAReport = 64 * 1024;
  struct statvfs space {};
  if (statvfs(folder.c_str(), &space) != 0) return false;
  return static_cast<unsigned long long>(space.f_bavail) * space.f_frsize < kTooLittleForAReport;
}

ProcessReportFile readProcessReport(const std::string& session, long pid) {
  std::string base = session + "/" + std::to_string(pid);
  ProcessReportFile file{readFile(base + inject::kReportSuffix), "", false};
  if (file.json.empty()) {
    file.json = readFile(base + inject::kInterimReportSuffix);
    if (!file.json.empty()) file.interim_age = ageOf(base + inject::kInterimReportSuffix);
  }
  if (file.json.empty()) file.folder_full = folderIsFull(session);
  return file;
}

namespace {

// A rank of another node that rank 0 gathered, from its rank-R.gathered file (run_protocol.h);
// empty where the file is not one.
std::optional<RankProcess> gatheredRank(const std::string& text) {
  std::size_t body = text.find("\n\n");
  if (body == std::string::npos || text.rfind(common::kGatheredSchema.tag() + "\n", 0) != 0) {
    return std::nullopt;
  }
  RankProcess rank;
  rank.identity.node = -1;  // a rank that sent nothing: not known
  forEachSetting(text.substr(0, body), [&](const std::string& key, const std::string& value) {
    if (key == "rank") rank.identity.rank = rank.identity.local_rank = std::atoi(value.c_str());
    if (key == "world_size") rank.identity.world_size = std::atoi(value.c_str());
    if (key == "run_id") rank.identity.run_id = value;
    if (key == "nodes") rank.identity.nodes = std::max(1, std::atoi(value.c_str()));
    if (key == "node") rank.identity.node = std::atoi(value.c_str());
    if (key == "host") rank.host = value;
    if (key == "pid") rank.pid = std::strtol(value.c_str(), nullptr, 10);
    if (key == "missing") rank.missing_reason = value;
  });
  const RankIdentity& id = rank.identity;
  if (id.world_size < 1 || id.rank < 0 || id.rank >= id.world_size || id.node >= id.nodes) {
    return std::nullopt;
  }
  rank.report_json = text.substr(body + 2);
  return rank;
}

}  // namespace

std::vector<RankProcess> rankProcesses(const std::vector<TracedProcess>& processes,
                                       const std::string& session) {
  std::vector<RankProcess> ranks;
  for (const TracedProcess& process : processes) {
    if (!process.rank || process.kind == "fork") continue;
    ProcessReportFile file = readProcessReport(session, process.pid);
    RankProcess rank;
    rank.pid = process.pid;
    rank.identity = *process.rank;
    rank.report_json = std::move(file.json);
    rank.interim_age = std::move(file.interim_age);
    ranks.push_back(std::move(rank));
  }
  // The other nodes' ranks, where this is rank 0's node of a job across machines.
  for (const std::string& name : filesEndingWith(session, inject::kGatheredSuffix)) {
    if (std::optional<RankProcess> rank = gatheredRank(readFile(session + "/" + name))) {
      ranks.push_back(std::move(*rank));
    }
  }
  return ranks;
}

namespace {

const char* const kNoReportReason =
    " (killed by SIGKILL, or ended by _exit, before its first step boundary and time window)";

}  // namespace

std::optional<LeakReport> processReport(long pid, const ProcessReportFile& file,
                                        std::ostringstream& text) {
  if (file.json.empty() && file.folder_full) {
    text << "memseal run: pid " << pid << " could not write its report: the run's folder has no "
         << "space left (the process said its report on stderr)\n";
    return std::nullopt;
  }
  if (file.json.empty()) {
    text << "memseal run: pid " << pid << " ended before memseal could write its report"
         << kNoReportReason << "\n";
    return std::nullopt;
  }
  LeakReport report;
  try {
    report = LeakReport::fromJson(file.json);
  } catch (const std::exception& error) {
    text << "memseal run: the report of pid " << pid << " cannot be read: " << error.what() << "\n";
    return std::nullopt;
  }
  if (!file.interim_age.empty()) {
    report.origin.interim_age = file.interim_age;
    report.origin.pid = pid;
    // The launcher's output says it too, in the report's words for it.
    LeakReport said;
    said.origin.interim_age = file.interim_age;
    said.origin.pid = pid;
    for (const std::string& line : said.noteLines()) text << line << "\n";
  }
  return report;
}

std::string childHeading(const TracedProcess& child) {
  return "\nmemseal run: child pid " + std::to_string(child.pid) + " of " +
         std::to_string(child.ppid) + " (" + (child.kind == "fork" ? "forked" : "exec'd") +
         "): " + child.program + "\n";
}

namespace {

constexpr std::size_t kNamedOneByOne = 4;
constexpr std::size_t kPidsListed = 8;

void listPids(const std::vector<long>& pids, std::ostringstream& text) {
  text << "pids";
  for (std::size_t i = 0; i < pids.size() && i < kPidsListed; ++i) {
    text << (i == 0 ? " " : ", ") << pids[i];
  }
  text << (pids.size() > kPidsListed ? ", ...\n" : "\n");
}

}  // namespace

void sayQuietChildren(const std::vector<QuietChild>& children, std::ostringstream& text) {
  if (children.size() <= kNamedOneByOne) {
    for (const QuietChild& child : children) text << child.said;
    return;
  }
  std::vector<long> pids;
  for (const QuietChild& child : children) pids.push_back(child.process.pid);
  text << "\nmemseal run: " << children.size()
       << " child processes reported no leak (--json writes each child's report, .PID before the "
          "extension): ";
  listPids(pids, text);
}

void sayChildrenWithoutReport(const std::vector<TracedProcess>& children,
                              std::ostringstream& text) {
  if (children.size() <= kNamedOneByOne) {
    for (const TracedProcess& child : children) {
      text << childHeading(child);
      processReport(child.pid, ProcessReportFile{}, text);  // says it left none
    }
    return;
  }
  std::vector<long> pids;
  for (const TracedProcess& child : children) pids.push_back(child.pid);
  text << "\nmemseal run: " << children.size()
       << " child processes ended before memseal could write their reports (killed by SIGKILL, or "
          "ended by _exit, before their first step boundary and time window): ";
  listPids(pids, text);
}

}  // namespace memseal::cli
