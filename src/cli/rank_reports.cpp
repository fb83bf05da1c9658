#include "cli/rank_reports.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace memseal::cli {

namespace {

std::vector<std::string> jsonFilesIn(const std::string& folder, bool ranks_only) {
  std::vector<std::string> files;
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return files;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (!endsWith(name, ".json") || name == "merged.json") continue;
    if (ranks_only && name.rfind("rank-", 0) != 0) continue;
    files.push_back(folder + (endsWith(folder, "/") ? "" : "/") + name);
  }
  closedir(dir);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool rankReportFiles(const std::vector<std::string>& inputs, std::vector<std::string>* files,
                     std::string* error) {
  for (const std::string& input : inputs) {
    struct stat info {};
    if (stat(input.c_str(), &info) != 0) {
      *error = input + ": no such file or folder";
      return false;
    }
    if (!S_ISDIR(info.st_mode)) {
      files->push_back(input);
      continue;
    }
    std::vector<std::string> found = jsonFilesIn(input, true);
    if (found.empty()) found = jsonFilesIn(input, false);
    if (found.empty()) {
      *error = input + ": no rank reports in it (rank-N.json, or any memseal.check *.json)";
      return false;
    }
    files->insert(files->end(), found.begin(), found.end());
  }
  if (files->empty()) *error = "no report files given";
  return !files->empty();
}

bool readRankReport(const std::string& path, RankReport* rank, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    *error = path + ": cannot be read";
    return false;
  }
  std::stringstream content;
  content << file.rdbuf();
  try {
    *rank = rankReportFromJson(content.str(), path);
    return true;
  } catch (const std::invalid_argument& failure) {
    *error = path + ": " + failure.what();
    return false;
  }
}

}  // namespace memseal::cli
