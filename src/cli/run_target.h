// What `memseal run` checks of the program before it starts it, and where the libraries it injects
// are (run_target.cpp).
#pragma once

#include <string>

namespace memseal::cli {

// The program's path when memseal can start and trace it (found in PATH, executable, reachable by
// LD_PRELOAD, a Python with the torch memseal was built against), or empty after saying why not.
std::string traceableProgram(const std::string& name);

// The folder holding libmemseal_preload.so and libmemseal_run.so: MEMSEAL_RUN_LIBDIR, else next
// to the memseal command in a build tree (lib/memseal) or an install (../LIBDIR/memseal); empty
// when none has them.
std::string injectLibraryDirectory();

}  // namespace memseal::cli
