// The files each traced process writes into the run's folder (run_protocol.h), and what they say
// of the process.
#pragma once

#include <string>

namespace memseal::inject {

// A file of the run's folder, written whole or not at all. The first failure (a full disk) is
// said once per process: the launcher reads nothing it could not write.
bool writeFileWhole(const std::string& path, const std::string& content);

// This process's command line, its arguments joined by spaces (/proc/self/cmdline).
std::string programName();

}  // namespace memseal::inject
