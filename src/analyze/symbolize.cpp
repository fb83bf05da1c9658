// dladdr names the library and exported symbols; addr2line (binutils) adds file:line and static
// functions from debug info. Results are cached per address: reports see the same frames again.
#include "analyze/symbolize.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include <unistd.h>

#include "common/text.h"
#include "track/python_frames.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace memseal::analyze {

namespace {

std::string demangle(const char* symbol) {
  if (symbol == nullptr) return "";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(symbol, nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(symbol);
}

bool isInternalLibrary(const std::string& path) {
  static const char* const kInternal[] = {"libtorch",   "libc10",   "libgomp",    "libc.so",
                                          "libstdc++",  "libgcc_s", "libmemseal", "ld-linux",
                                          "libpthread", "libshm",   "libcaffe2",  "libm.so",
                                          "libasan",    "libubsan", "libtsan",    "libpython"};
  std::string name = common::baseName(path);
  for (const char* prefix : kInternal) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

struct Resolved {
  StackFrame frame;
  std::uintptr_t file_offset = 0;  // address relative to the library's load bias, for addr2line
};

std::mutex g_cache_mutex;
std::unordered_map<std::uintptr_t, StackFrame>& cache() {
  static auto* frames = new std::unordered_map<std::uintptr_t, StackFrame>();
  return *frames;
}

// The shared object that holds memseal's core: libmemseal.so, the Python module or the runtime of
// `memseal run`, whichever this code was linked into. Its frames are memseal's own (the tracker's
// hook, the detector), whatever their symbols say: hidden functions have no name for dladdr.
const void* ownObjectBase() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&isInternalLibrary), &info) != 0 ? info.dli_fbase
                                                                           : nullptr;
  }();
  return base;
}

std::string mainProgramPath();

// Whether the program is Python's interpreter (python3.11, python): its own frames (ceval.c, the
// object and call machinery) are the interpreter's, never the user's.
bool mainProgramIsPython() {
  static const bool python = common::baseName(mainProgramPath()).rfind("python", 0) == 0;
  return python;
}

Resolved resolveWithDladdr(std::uintptr_t address) {
  Resolved resolved;
  resolved.frame.address = address;
  Dl_info info{};
  link_map* map = nullptr;
  // A return address points after the call; look up the call itself.
  void* lookup = reinterpret_cast<void*>(address - 1);
  if (dladdr1(lookup, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0) {
    bool main_program = map != nullptr && (map->l_name == nullptr || map->l_name[0] == '\0');
    resolved.frame.library =
        main_program ? "(main program)" : (info.dli_fname != nullptr ? info.dli_fname : "");
    resolved.frame.function = demangle(info.dli_sname);
    resolved.file_offset = address - 1 - (map != nullptr ? map->l_addr : 0);
  }
  resolved.frame.is_internal = isInternalLibrary(resolved.frame.library);
  // memseal's core in a shared object (in the main program only in memseal's own unit tests, whose
  // test code stands for the user's), and the interpreter's own code.
  bool main_program = resolved.frame.library == "(main program)";
  if (!main_program && info.dli_fbase != nullptr && info.dli_fbase == ownObjectBase()) {
    resolved.frame.is_internal = true;
  }
  if (main_program && mainProgramIsPython()) resolved.frame.is_internal = true;
  // In a Python process the native frames are the interpreter's, torch's bindings' and
  // extensions': the user's lines are the Python frames above them (track/python_frames.h).
  if (track::pythonFramesAvailable()) resolved.frame.is_internal = true;
  return resolved;
}

std::string mainProgramPath() {
  char buffer[4096];
  ssize_t length = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (length <= 0) return "";
  buffer[length] = '\0';
  return buffer;
}

// Inline functions from libtorch's headers are compiled into the user's binary; they are still
// libtorch's frames, not the user's.
bool isInternalSource(const StackFrame& frame) {
  static const char* const kInternalPaths[] = {"/torch/include/", "/include/ATen/", "/include/c10/",
                                               "/include/torch/", "/include/c++/"};
  for (const char* path : kInternalPaths) {
    if (frame.file.find(path) != std::string::npos) return true;
  }
  // memseal's own code (the CLI that runs a case, the detector's loop helper, inline code of its
  // public headers) is not the user's either; its example loops are, they stand for user code.
  // Told by namespace, never by path: a user's checkout may well live in a folder named memseal,
  // and debug info may name another checkout's paths when objects come from a shared cache.
  if (frame.function.rfind("memseal::", 0) == 0 &&
      frame.function.rfind("memseal::examples::", 0) != 0) {
    return true;
  }
  // A line in a user's file is the user's, whatever it was inlined into: a lambda inlined into
  // std::function's invoker is named after the invoker.
  if (!frame.file.empty()) return false;
  return frame.function == "_start" || frame.function.rfind("__libc_start", 0) == 0 ||
         frame.function.rfind("std::", 0) == 0;
}

// Runs addr2line once for all offsets of one library. With -i it prints the chain of inlined
// calls for each address (innermost first), so a user's lambda shows even when libtorch's inline
// header functions or std::function's invoker were inlined into the same machine code; -a prints
// each address first, which is how the chains are told apart.
void addLineInfo(const std::string& library, std::vector<Resolved*>& frames) {
  std::string path = library == "(main program)" ? mainProgramPath() : library;
  if (path.empty() || frames.empty()) return;
  std::string command = "addr2line -a -i -C -f -e '" + path + "'";
  for (const Resolved* frame : frames) {
    char offset[32];
    std::snprintf(offset, sizeof(offset), " 0x%lx", static_cast<unsigned long>(frame->file_offset));
    command += offset;
  }
  command += " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return;
  std::vector<std::string> lines;
  char buffer[8192];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    std::string line(buffer);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    lines.push_back(line);
  }
  pclose(pipe);
  std::size_t index = 0;
  for (Resolved* frame : frames) {
    // Skip to this address's header line.
    while (index < lines.size() && lines[index].rfind("0x", 0) != 0) ++index;
    if (index >= lines.size()) break;
    ++index;
    std::vector<StackFrame> chain;
    while (index + 1 < lines.size() && lines[index].rfind("0x", 0) != 0) {
      StackFrame entry = frame->frame;
      if (lines[index] != "??" && !lines[index].empty()) entry.function = lines[index];
      const std::string& where = lines[index + 1];
      std::size_t colon = where.rfind(':');
      if (colon != std::string::npos && where.compare(0, 2, "??") != 0) {
        std::string number = where.substr(colon + 1);
        std::size_t space = number.find(' ');  // "12 (discriminator 3)"
        if (space != std::string::npos) number = number.substr(0, space);
        if (std::atoi(number.c_str()) > 0) {
          entry.file = common::normalPath(where.substr(0, colon));
          entry.line = std::atoi(number.c_str());
        }
      }
      chain.push_back(entry);
      index += 2;
    }
    if (chain.empty()) continue;
    // The innermost inlined call that is the user's own code, else the innermost.
    frame->frame = chain.front();
    for (const StackFrame& entry : chain) {
      if (!isInternalSource(entry)) {
        frame->frame = entry;
        break;
      }
    }
  }
}

}  // namespace

std::vector<StackFrame> symbolizeStack(const std::uintptr_t* addresses, int depth) {
  std::vector<StackFrame> result(static_cast<std::size_t>(depth));
  std::vector<Resolved> unresolved;
  std::vector<int> unresolved_index;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    for (int i = 0; i < depth; ++i) {
      auto found = cache().find(addresses[i]);
      if (found != cache().end()) {
        result[static_cast<std::size_t>(i)] = found->second;
      } else {
        unresolved.push_back(resolveWithDladdr(addresses[i]));
        unresolved_index.push_back(i);
      }
    }
  }
  std::map<std::string, std::vector<Resolved*>> by_library;
  for (Resolved& resolved : unresolved) {
    if (!resolved.frame.is_internal) by_library[resolved.frame.library].push_back(&resolved);
  }
  for (auto& [library, frames] : by_library) addLineInfo(library, frames);
  for (Resolved& resolved : unresolved) {
    if (!resolved.frame.is_internal) resolved.frame.is_internal = isInternalSource(resolved.frame);
  }
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  for (std::size_t i = 0; i < unresolved.size(); ++i) {
    cache()[unresolved[i].frame.address] = unresolved[i].frame;
    result[static_cast<std::size_t>(unresolved_index[i])] = unresolved[i].frame;
  }
  return result;
}

}  // namespace memseal::analyze
