#include "cli/baseline_flags.h"

#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "memseal/diff.h"

namespace memseal::cli {

void BaselineFlags::addTo(CLI::App* command) {
  command->add_option("--baseline", path,
                      "Hold this run to a baseline report: the first run writes FILE, later runs "
                      "exit 1 when the peak grows more than --tolerance or a new leak cause "
                      "appears (exit 0 otherwise, whatever the report says)");
  command->add_option("--tolerance", tolerance_text,
                      "How much the peak may grow over the baseline: 5% (default) or 0.05");
  command->add_flag("--update-baseline", update,
                    "Write this run's report as the baseline, replacing the one there");
}

bool BaselineFlags::check(const char* command) const {
  if (!parseTolerance(tolerance_text)) {
    std::cerr << "memseal " << command << ": --tolerance " << tolerance_text
              << " is not a fraction such as 5% or 0.05 (0 to 1000%)\n";
    return false;
  }
  if (update && path.empty()) {
    std::cerr << "memseal " << command << ": --update-baseline needs --baseline FILE\n";
    return false;
  }
  return checkOutputPath(command, "--baseline", path);
}

bool readTextFile(const std::string& path, std::string* content) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::stringstream text;
  text << file.rdbuf();
  *content = text.str();
  return !file.bad();
}

int BaselineFlags::apply(const char* command, const std::string& report_json) const {
  struct stat info {};
  if (update || stat(path.c_str(), &info) != 0) {
    if (!writeOutput(command, path, report_json)) return kExitUsage;
    std::cout << "memseal baseline: written to " << path
              << (update ? " (replacing the one there)" : " (none was there)") << "\n";
    return kExitOk;
  }
  std::string baseline;
  if (!readTextFile(path, &baseline)) {
    std::cerr << "memseal " << command << ": --baseline " << path << " cannot be read\n";
    return kExitUsage;
  }
  try {
    DiffOptions options;
    options.before_label = path;
    options.after_label = "this run";
    BaselineCheck held =
        checkAgainstBaseline(baseline, report_json, *parseTolerance(tolerance_text), options);
    if (!held.passed) {
      std::cout << "\n" << held.diff.toText() << "\n";
      for (const std::string& failure : held.failures)
        std::cout << "over the baseline: " << failure << "\n";
    }
    std::cout << held.summary << "\n";
    return held.passed ? kExitOk : kExitLeak;
  } catch (const std::invalid_argument& error) {
    std::cerr << "memseal " << command << ": --baseline: " << error.what()
              << " (--update-baseline replaces it)\n";
    return kExitUsage;
  }
}

}  // namespace memseal::cli
