// libmemseal_run_python.so, as the runtime of `memseal run` uses it: loaded only into a process
// that runs Python, and only for the Python version memseal was built for (another version's
// interpreter is left alone, with native frames only).
#pragma once

#include <optional>
#include <string>

namespace memseal::inject {

// Loads the plugin and turns on Python frames for every captured stack, and tells the tracker when
// Python's garbage collector runs (track/collected_frees.h); `at_python_exit` runs from Python's
// atexit, before the interpreter finalises, and `after_fork_in_child` in a child of os.fork() once
// Python has remade its GIL and thread states there. True when Python frames are on (what cannot
// be had is said on stderr).
bool startPythonFrames(void (*at_python_exit)(), void (*after_fork_in_child)());

// The runtime's handler of the program's own step signals: (kind, Python id() of the object, its
// name) (run_python_steps.cpp, step_hooks.py).
using StepSignalHandler = void (*)(int, unsigned long long, const char*);
// Takes the GIL and installs PyTorch's hooks that signal `handler`. 1: installed; 0: not yet (torch
// is still being imported, or Python is finalising); -1: they cannot be (said on stderr), or the
// plugin is not loaded.
int watchPythonSteps(StepSignalHandler handler);

// Takes the GIL and runs the Python module's holder search on the program's heap for the findings
// in `request` (run_holders.h writes it); the holders as JSON, or empty where Python cannot run it
// (not loaded, finalising).
std::optional<std::string> findPythonHolders(const std::string& request);

}  // namespace memseal::inject
