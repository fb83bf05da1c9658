// Collects the subcommands; each lives in its own file and registers through one function.
#include "cli/commands.h"

#include <functional>
#include <iostream>
#include <vector>

#include "cli/command_list.h"

namespace memseal::cli {

namespace {
std::vector<CommandEntry>& entries() {
  static std::vector<CommandEntry> list;
  return list;
}
}  // namespace

void registerCommands(CLI::App& app) {
  addCheckCommand(app, entries());
  addDiffCommand(app, entries());
  addExplainCommand(app, entries());
  addFitCommand(app, entries());
  addMergeCommand(app, entries());
  addPlanCommand(app, entries());
  addReportCommand(app, entries());
  addRunCommand(app, entries());
  addWhatIfCommand(app, entries());
}

int runSelected(CLI::App& app) {
  for (const CommandEntry& entry : entries()) {
    if (entry.app->parsed()) return entry.run();
  }
  std::cerr << app.help();
  return kExitUsage;
}

}  // namespace memseal::cli
