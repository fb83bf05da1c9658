// Subcommands of the memseal CLI. Exit codes: 0 no leak / success, 1 leak found, 2 usage or load
// error.
#pragma once

#include <CLI/CLI.hpp>

namespace memseal::cli {

constexpr int kExitOk = 0;
constexpr int kExitLeak = 1;
constexpr int kExitUsage = 2;

void registerCommands(CLI::App& app);
// Runs the subcommand that was parsed; returns the process exit code.
int runSelected(CLI::App& app);
// `memseal run [options] -- PROGRAM ARGS...`: the words after "--" are the program's, whatever
// they look like; they are set aside before CLI11 parses the rest. Returns the argc to parse.
int setAsideRunProgram(int argc, char** argv);

}  // namespace memseal::cli
