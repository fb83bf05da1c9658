// libmemseal_run_python.so, its third part: what holds a leak's tensors, found on the traced
// program's heap by the Python module's own holder search (embedded with
// src/inject/python/holder_search.py), for `memseal run` (run_holders.h decides when).
#include <Python.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "inject/embedded_python.h"
#include "inject/run_python_embedded.h"

namespace {

PyObject* g_find = nullptr;  // holder_search.find, once loaded
bool g_unavailable = false;  // the search could not be loaded (said once)

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

PyObject* findFunction() {
  if (g_find != nullptr || g_unavailable) return g_find;
  using memseal::inject::embedded::kHolderRoots;
  using memseal::inject::embedded::kHolders;
  using memseal::inject::embedded::kHolderSearch;
  using memseal::inject::embedded::kLiveSample;
  PyObject* globals = memseal::inject::runEmbeddedModule(
      kHolderSearch, "/<memseal run>/holder_search.py", "memseal_run_holder_search",
      {{"LIVE_SAMPLE_SOURCE", kLiveSample},
       {"HOLDER_ROOTS_SOURCE", kHolderRoots},
       {"HOLDERS_SOURCE", kHolders}});
  if (globals != nullptr) {
    g_find = PyDict_GetItemString(globals, "find");  // borrowed, kept alive below
    Py_XINCREF(g_find);
    Py_DECREF(globals);
  }
  if (g_find == nullptr) {
    g_unavailable = true;
    std::string why = PyErr_Occurred() ? memseal::inject::takePythonError() : "no find()";
    std::fprintf(stderr, "memseal run: what holds a leak cannot be searched for (%s)\n",
                 why.c_str());
  }
  return g_find;
}

}  // namespace

// With the GIL held. The holders of the findings in `request` (JSON, see holder_search.py) as JSON
// in a buffer the caller frees with free(); nullptr where Python cannot run the search.
extern "C" __attribute__((visibility("default"))) char* memseal_run_python_find_holders(
    const char* request) {
  if (!Py_IsInitialized() || finalizing()) return nullptr;
  PyObject* find = findFunction();
  if (find == nullptr) return nullptr;
  PyObject* result = PyObject_CallFunction(find, "s", request);
  const char* text = result != nullptr ? PyUnicode_AsUTF8(result) : nullptr;
  char* copy = text != nullptr ? strdup(text) : nullptr;
  if (copy == nullptr) PyErr_Clear();
  Py_XDECREF(result);
  return copy;
}
