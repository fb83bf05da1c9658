// The memseal command line: subcommands register themselves in commands.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "memseal/version.h"

int main(int argc, char** argv) {
  CLI::App app{"memseal: finds tensor memory leaks in libtorch programs and says why"};
  app.set_version_flag("--version", std::string("memseal ") + memseal::version() +
                                        " (libtorch " MEMSEAL_TORCH_VERSION ")");
  app.require_subcommand(1);
  memseal::cli::registerCommands(app);
  try {
    app.parse(memseal::cli::setAsideRunProgram(argc, argv), argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    // CLI11 exits 0 for --help/--version and 1..n for bad usage; usage errors are 2 for us.
    return code == 0 ? 0 : memseal::cli::kExitUsage;
  }
  try {
    return memseal::cli::runSelected(app);
  } catch (const std::exception& error) {
    std::string what = error.what();
    std::cerr << (what.rfind("memseal", 0) == 0 ? "" : "memseal: ") << what << "\n";
    return memseal::cli::kExitUsage;
  }
}
