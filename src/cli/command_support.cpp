#include "cli/command_support.h"

#include <sys/stat.h>

#include <iostream>

#include "memseal/explain.h"

namespace memseal::cli {

void setTrackerOption(TrackerOptions& tracker, const char* name, const char* flag,
                      const std::optional<std::string>& value) {
  if (!value) return;
  try {
    tracker.set(name, *value);
  } catch (const std::invalid_argument&) {
    throw CLI::ValidationError(
        flag, "'" + *value + "': expected " + TrackerOptions::expectedValues(name));
  }
}

bool checkOutputPath(const char* command, const char* flag, const std::string& path) {
  if (path.empty()) return true;
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    std::cerr << "memseal " << command << ": " << flag << " " << path << " is a directory\n";
    return false;
  }
  std::string::size_type slash = path.rfind('/');
  std::string folder = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  if (stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    std::cerr << "memseal " << command << ": " << flag << " " << path << ": no folder " << folder
              << "\n";
    return false;
  }
  return true;
}

bool writeOutput(const char* command, const std::string& path, const std::string& content) {
  try {
    writeReportFile(path, content);
    return true;
  } catch (const std::exception& error) {
    std::cerr << "memseal " << command << ": " << error.what() << "\n";
    return false;
  }
}

bool writeHtmlIfAsked(const char* command, const std::string& path, const std::string& case_path,
                      HtmlPage page) {
  if (path.empty()) return true;
  std::string::size_type slash = case_path.rfind('/');
  page.title = slash == std::string::npos ? case_path : case_path.substr(slash + 1);
  return writeOutput(command, path, renderHtml(page));
}

}  // namespace memseal::cli
