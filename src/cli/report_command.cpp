// `memseal report FILE.json`: prints a saved `memseal check --json` report as text again. Exit
// codes as `memseal check`: 0 no leak, 1 leak, 2 a file it cannot read (with what is wrong).
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "cli/command_list.h"
#include "cli/commands.h"
#include "memseal/leak_detector.h"

namespace memseal::cli {

namespace {

int runReport(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::cerr << "memseal report: cannot read " << path << "\n";
    return kExitUsage;
  }
  std::stringstream content;
  content << file.rdbuf();
  try {
    LeakReport report = LeakReport::fromJson(content.str());
    std::cout << report.toText();
    return report.leak ? kExitLeak : kExitOk;
  } catch (const std::invalid_argument& error) {
    std::cerr << path << ": " << error.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace

void addReportCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto path = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand(
      "report",
      "Print a report saved by `memseal check --json` as text (exit 0: no leak, 1: "
      "leak, 2: unreadable)");
  command->add_option("file", *path, "A JSON report (memseal.check/1)")
      ->required()
      ->check(CLI::ExistingFile);
  entries.push_back({command, [path] { return runReport(*path); }});
}

}  // namespace memseal::cli
