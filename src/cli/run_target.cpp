// What `memseal run` checks of the program before it starts it: where it is (PATH as execvp
// looks), that LD_PRELOAD can reach it (not set-user-ID, not statically linked), that a Python
// runs the torch memseal was built against; and where the libraries it injects are.
#include "cli/run_target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/torch_versions.h"

namespace memseal::cli {

namespace {

void refuseProgram(const std::string& message) { std::cerr << "memseal run: " << message << "\n"; }

// PATH lookup as execvp does it; empty when not found.
std::string resolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::stringstream folders(path == nullptr ? "/usr/local/bin:/usr/bin:/bin" : path);
  std::string folder;
  while (std::getline(folders, folder, ':')) {
    std::string candidate = (folder.empty() ? "." : folder) + "/" + name;
    struct stat info {};
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// Why LD_PRELOAD cannot reach the program, or empty. Scripts (#!) run an interpreter that is
// checked when it starts; ELF files need a program interpreter (the dynamic loader).
std::string whyNotInjectable(const std::string& path, const struct stat& info) {
  if ((info.st_mode & (S_ISUID | S_ISGID)) != 0) {
    return "it is set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it";
  }
  std::ifstream in(path, std::ios::binary);
  unsigned char header[64] = {};
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  std::size_t length = static_cast<std::size_t>(in.gcount());
  if (length < 4 || std::memcmp(header,
                                "\x7f"
                                "ELF",
                                4) != 0)
    return "";
  if (length < 64 || header[4] != 2 /* ELFCLASS64 */ || header[5] != 1 /* little endian */) {
    return "it is not a 64-bit little-endian ELF program like this memseal";
  }
  auto read16 = [&](std::size_t at) { return header[at] | (header[at + 1] << 8); };
  std::uint64_t program_headers = 0;
  std::memcpy(&program_headers, header + 32, sizeof(program_headers));
  std::size_t entry_size = read16(54);
  std::size_t entries = read16(56);
  for (std::size_t i = 0; i < entries; ++i) {
    unsigned char entry[8] = {};
    in.clear();
    in.seekg(static_cast<std::streamoff>(program_headers + i * entry_size));
    in.read(reinterpret_cast<char*>(entry), sizeof(entry));
    if (in.gcount() != sizeof(entry)) break;
    std::uint32_t type = 0;
    std::memcpy(&type, entry, sizeof(type));
    if (type == 3 /* PT_INTERP */) return "";
  }
  return "it is statically linked: there is no dynamic loader to inject memseal with LD_PRELOAD";
}

std::string selfDirectory() {
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return ".";
  path[length] = '\0';
  std::string text(path);
  return text.substr(0, text.rfind('/'));
}

}  // namespace

// The folder holding libmemseal_preload.so and libmemseal_run.so: MEMSEAL_RUN_LIBDIR, else next
// to the memseal command in a build tree (lib/memseal) or an install (../LIBDIR/memseal).
std::string injectLibraryDirectory() {
  std::vector<std::string> candidates;
  if (const char* forced = std::getenv("MEMSEAL_RUN_LIBDIR")) candidates.emplace_back(forced);
  std::string self = selfDirectory();
  candidates.push_back(self + "/lib/memseal");
  candidates.push_back(self + "/../" MEMSEAL_INSTALL_LIBDIR "/memseal");
  for (const std::string& folder : candidates) {
    if (access((folder + "/libmemseal_preload.so").c_str(), R_OK) == 0 &&
        access((folder + "/libmemseal_run.so").c_str(), R_OK) == 0) {
      return folder;
    }
  }
  return "";
}

// The program's path when memseal can start and trace it, or empty after saying why not.
std::string traceableProgram(const std::string& name) {
  std::string program = resolveProgram(name);
  struct stat info {};
  if (program.empty() || stat(program.c_str(), &info) != 0) {
    refuseProgram(name + ": no such program" +
                  (name.find('/') == std::string::npos ? " in PATH" : std::string()));
    return "";
  }
  if (S_ISDIR(info.st_mode)) {
    refuseProgram(program + " is a directory, not a program");
    return "";
  }
  if (access(program.c_str(), X_OK) != 0) {
    refuseProgram(program + " is not executable (chmod +x, or run it through its interpreter)");
    return "";
  }
  std::string why = whyNotInjectable(program, info);
  if (why.empty()) why = torchMismatch(program, MEMSEAL_TORCH_VERSION);
  if (!why.empty()) {
    refuseProgram("cannot trace " + program + ": " + why);
    return "";
  }
  return program;
}

}  // namespace memseal::cli
