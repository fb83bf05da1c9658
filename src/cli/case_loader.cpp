// Checks a case before dlopen so that mistakes get a sentence, not a crash: the ELF header, and
// the libtorch its RUNPATH points at (a second libtorch cannot be loaded beside ours; the dynamic
// linker would silently bind the case to ours, ABI differences and all).
#include "cli/case_loader.h"

#include "cli/command_support.h"
#include "cli/torch_versions.h"

#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace memseal::cli {

namespace {

std::string realPath(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : std::string();
}

std::string directoryOf(const std::string& path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Reads RUNPATH/RPATH entries of a 64-bit ELF shared object; false if it is not one.
bool readElf(const std::string& path, std::vector<std::string>* search_paths, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0) {
    *error = path + " is not a shared library (it has no ELF header)";
    if (path.size() > 3 && endsWith(path, ".py")) {
      *error +=
          "; Python files are run by the memseal command of memseal's Python package "
          "(pip install it, then `memseal check " +
          path + "`, or explain / fit)";
    }
    return false;
  }
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_type != ET_DYN) {
    *error =
        path +
        " is an ELF file but not a 64-bit shared library (build it with add_library(... SHARED))";
    return false;
  }
  auto section = [&](std::size_t index, Elf64_Shdr* out) {
    std::size_t offset = header.e_shoff + index * header.e_shentsize;
    if (offset + sizeof(Elf64_Shdr) > bytes.size()) return false;
    std::memcpy(out, bytes.data() + offset, sizeof(Elf64_Shdr));
    return true;
  };
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr dynamic;
    Elf64_Shdr strings;
    if (!section(i, &dynamic) || dynamic.sh_type != SHT_DYNAMIC) continue;
    if (!section(dynamic.sh_link, &strings)) break;
    for (std::size_t at = dynamic.sh_offset;
         at + sizeof(Elf64_Dyn) <= dynamic.sh_offset + dynamic.sh_size &&
         at + sizeof(Elf64_Dyn) <= bytes.size();
         at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry;
      std::memcpy(&entry, bytes.data() + at, sizeof(entry));
      if (entry.d_tag != DT_RUNPATH && entry.d_tag != DT_RPATH) continue;
      std::size_t offset = strings.sh_offset + entry.d_un.d_val;
      if (offset >= bytes.size()) continue;
      std::stringstream list(std::string(bytes.data() + offset));
      std::string item;
      while (std::getline(list, item, ':')) {
        std::size_t origin = item.find("$ORIGIN");
        if (origin != std::string::npos) item.replace(origin, 7, directoryOf(realPath(path)));
        if (!item.empty()) search_paths->push_back(item);
      }
    }
  }
  return true;
}

}  // namespace

std::string runningTorchLibraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  return directoryOf(realPath(info.dli_fname));
}

bool loadCase(const std::string& path, LoadedCase* loaded, std::string* error, CaseEntry needed) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    *error = path + ": no such file";
    return false;
  }
  if (S_ISDIR(info.st_mode)) {
    *error = path + " is a directory, not a shared library";
    return false;
  }
  std::vector<std::string> search_paths;
  if (!readElf(path, &search_paths, error)) return false;
  std::string ours = runningTorchLibraryDir();
  std::string our_version = torchVersionBeside(ours);
  for (const std::string& dir : search_paths) {
    std::string theirs = realPath(dir + "/libc10.so");
    if (theirs.empty() || directoryOf(theirs) == ours) continue;
    std::string their_version = torchVersionBeside(directoryOf(theirs));
    if (their_version != our_version) {
      *error = path + " was built against the libtorch in " + directoryOf(theirs) +
               (their_version.empty() ? "" : " (" + their_version + ")") +
               ", but memseal runs with the libtorch in " + ours +
               (our_version.empty() ? "" : " (" + our_version + ")") +
               ". Rebuild the case against memseal's libtorch: cmake -DTorch_DIR=" + ours +
               "/../share/cmake/Torch";
      return false;
    }
  }
  void* handle = dlopen(realPath(path).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::string reason = dlerror();
    *error = "cannot load " + path + ": " + reason;
    if (reason.find("undefined symbol") != std::string::npos) {
      *error += "\n  (was it built against another libtorch? memseal runs with " + ours +
                (our_version.empty() ? "" : ", torch " + our_version) + ")";
    }
    return false;
  }
  loaded->handle = handle;
  loaded->step = reinterpret_cast<void (*)(int)>(dlsym(handle, "step"));
  loaded->setup = reinterpret_cast<void (*)()>(dlsym(handle, "setup"));
  loaded->sized_step = reinterpret_cast<void (*)(std::int64_t, int)>(dlsym(handle, "sized_step"));
  loaded->roles = reinterpret_cast<void (*)(RoleTensors*)>(dlsym(handle, "memseal_roles"));
  if (needed == CaseEntry::kSizedStep && loaded->sized_step == nullptr) {
    *error = path +
             " does not export `extern \"C\" void sized_step(std::int64_t size, int step)`, "
             "which `memseal fit` runs at each size; declare it extern \"C\" and visible "
             "(__attribute__((visibility(\"default\"))))";
    return false;
  }
  if (needed == CaseEntry::kStep && loaded->step == nullptr) {
    *error = path +
             " does not export `extern \"C\" void step(int)`; declare it extern \"C\" and "
             "visible (__attribute__((visibility(\"default\"))))";
    return false;
  }
  return true;
}

}  // namespace memseal::cli
