// libmemseal_run_python.so: running the Python code embedded into it (src/inject/python/, through
// cmake/MemsealEmbeddedPython.cmake) inside the traced program. With the GIL held.
#pragma once

#include <Python.h>

#include <string>
#include <utility>
#include <vector>

namespace memseal::inject {

// Runs `source` as a module named `module_name` whose file is `file_name` (an absolute path under
// "/<memseal run>/", which no file has) in fresh globals, with `strings` set in them first. The
// globals (a new reference), or nullptr with Python's error set.
PyObject* runEmbeddedModule(const char* source, const char* file_name, const char* module_name,
                            const std::vector<std::pair<const char*, const char*>>& strings = {});

// Python's error in one line, cleared ("unknown error" when none is set).
std::string takePythonError();

}  // namespace memseal::inject
