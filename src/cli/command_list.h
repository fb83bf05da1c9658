// The subcommands' registration functions, one per file in src/cli/.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace memseal::cli {

struct CommandEntry {
  CLI::App* app;
  std::function<int()> run;
};

void addCheckCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addDiffCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addExplainCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addFitCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addMergeCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addPlanCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addReportCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addRunCommand(CLI::App& app, std::vector<CommandEntry>& entries);
void addWhatIfCommand(CLI::App& app, std::vector<CommandEntry>& entries);

}  // namespace memseal::cli
