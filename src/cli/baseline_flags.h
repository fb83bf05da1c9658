// `--baseline FILE --tolerance 5% [--update-baseline]` of the commands that measure memory (check,
// explain): the first run writes the baseline, later runs are held to it.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace memseal::cli {

struct BaselineFlags {
  std::string path;
  std::string tolerance_text = "5%";
  bool update = false;

  void addTo(CLI::App* command);
  bool given() const { return !path.empty() || update; }
  // Before anything runs: the tolerance is understood and the file can be written. False with a
  // message on stderr.
  bool check(const char* command) const;
  // After the run, with its report: writes the baseline where there is none (or --update-baseline)
  // and returns kExitOk; else compares, prints the diff when it fails and one summary line, and
  // returns kExitOk or kExitLeak (held or not); kExitUsage for a baseline it cannot read or
  // compare.
  int apply(const char* command, const std::string& report_json) const;
};

// The whole file; false when it cannot be read.
bool readTextFile(const std::string& path, std::string* content);

}  // namespace memseal::cli
