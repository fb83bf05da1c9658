#include "cli/command_support.h"

#include <sys/stat.h>

#include <iostream>

#include "memseal/explain.h"

namespace memseal::cli {

namespace {

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

}  // namespace

void TrackerFlags::addTo(CLI::App* command, const char* watch_ops_default) {
  auto variable = [](const char* name) { return TrackerOptions::environmentVariable(name); };
  command->add_option(
      "--stacks", stacks,
      "Native stacks: on, off or sample:N (default on; env " + variable("stacks") + ")");
  if (watch_ops_default != nullptr) {
    command->add_option("--watch-ops", watch_ops,
                        std::string("Steps whose ops are watched: all, off, every:N or auto "
                                    "(default: ") +
                            watch_ops_default + "; env " + variable("watch_ops") + ")");
    // The flag's former name, still taken (deprecated), out of the help.
    command->add_option("--observe-ops", watch_ops)->group("");
  }
  command->add_option("--tensor-metadata", tensor_metadata,
                      "Read shape, dtype and grad_fn of new tensors: on or off (default on; env " +
                          variable("tensor_metadata") + ")");
}

void TrackerFlags::applyTo(TrackerOptions& tracker) const {
  setTrackerOption(tracker, "stacks", "--stacks", stacks);
  setTrackerOption(tracker, "watch_ops", "--watch-ops", watch_ops);
  setTrackerOption(tracker, "tensor_metadata", "--tensor-metadata", tensor_metadata);
}

void OutputFlags::addTo(CLI::App* command, const std::string& json_help) {
  command->add_option("--json", json_path, json_help);
  command->add_option("--html", html_path, "Write it as one self-contained HTML page");
}

bool OutputFlags::check(const char* command) const {
  return checkOutputPath(command, "--json", json_path) &&
         checkOutputPath(command, "--html", html_path);
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
