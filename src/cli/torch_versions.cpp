#include "cli/torch_versions.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/text.h"

// The torch releases memseal builds against, from cmake/MemsealTorch.cmake.
#ifndef MEMSEAL_TORCH_SUPPORTED
#define MEMSEAL_TORCH_SUPPORTED "2.9 up to, not including, 2.16"
#endif

namespace memseal::cli {

namespace {

using common::baseName;

// Printed by the program's Python: torch's folder, found as `import torch` would find it (the same
// sys.path, .pth files and PYTHONPATH) but without running torch/__init__.py.
constexpr const char* kFindTorch =
    "import importlib.util as u\n"
    "s = u.find_spec('torch')\n"
    "print(next(iter(s.submodule_search_locations or [])) if s else '')\n";

bool isPythonName(const std::string& path) { return baseName(path).rfind("python", 0) == 0; }

// The interpreter a #! script names (through /usr/bin/env too), or empty.
std::string scriptInterpreter(const std::string& program) {
  std::ifstream in(program);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0) return "";
  std::stringstream words(line.substr(2));
  std::string interpreter, argument;
  words >> interpreter >> argument;
  if (baseName(interpreter) == "env") return argument;
  return interpreter;
}

// Runs `python -c kFindTorch` with the program's environment (memseal's own, less LD_PRELOAD) and
// returns what it printed, without its newline; empty on any failure.
std::string askPython(const std::string& python) {
  int pipe_ends[2];
  if (pipe2(pipe_ends, O_CLOEXEC) != 0) return "";
  pid_t child = fork();
  if (child < 0) {
    close(pipe_ends[0]);
    close(pipe_ends[1]);
    return "";
  }
  if (child == 0) {
    dup2(pipe_ends[1], STDOUT_FILENO);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDERR_FILENO);
    unsetenv("LD_PRELOAD");
    execlp(python.c_str(), python.c_str(), "-c", kFindTorch, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_ends[1]);
  std::string out;
  char buffer[4096];
  ssize_t got;
  while ((got = read(pipe_ends[0], buffer, sizeof(buffer))) > 0 || (got < 0 && errno == EINTR)) {
    if (got > 0) out.append(buffer, static_cast<std::size_t>(got));
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

std::string torchVersionBeside(const std::string& lib_dir) {
  std::size_t slash = lib_dir.rfind('/');
  return torchPackageVersion(slash == std::string::npos ? "." : lib_dir.substr(0, slash));
}

std::string torchPackageVersion(const std::string& package_dir) {
  std::ifstream file(package_dir + "/version.py");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("__version__", 0) != 0) continue;
    std::size_t open = line.find_first_of("'\"");
    std::size_t close = line.find_last_of("'\"");
    if (open != std::string::npos && close > open) return line.substr(open + 1, close - open - 1);
  }
  return "";
}

std::string torchRelease(const std::string& version) {
  return version.substr(0, version.find('+'));
}

std::string pythonTorchFolder(const std::string& program) {
  std::string python = isPythonName(program) ? program : scriptInterpreter(program);
  if (python.empty() || !isPythonName(python)) return "";
  return askPython(python);
}

std::string torchMismatch(const std::string& program, const std::string& built_with) {
  std::string folder = pythonTorchFolder(program);
  if (folder.empty()) return "";  // no Python, or no torch: nothing memseal would be loaded into
  std::string theirs = torchPackageVersion(folder);
  if (theirs.empty() || torchRelease(theirs) == torchRelease(built_with)) return "";
  std::string python = isPythonName(program) ? program : scriptInterpreter(program);
  return "the Python it starts imports torch " + theirs + " (" + folder +
         "), but this memseal was built against torch " + built_with +
         ": its runtime cannot be loaded beside another libtorch. Run it with a Python whose torch "
         "is " +
         torchRelease(built_with) +
         ", or build memseal for that torch in that Python's environment (memseal builds against "
         "torch " MEMSEAL_TORCH_SUPPORTED "): " +
         python +
         " -m pip install --force-reinstall --no-deps --no-cache-dir PATH-TO-MEMSEAL (a checkout "
         "or its source archive; --no-build-isolation too where scikit-build-core is installed)";
}

}  // namespace memseal::cli
