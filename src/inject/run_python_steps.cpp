// libmemseal_run_python.so, its second part: the program's own step signals for `memseal run`
// (an optimizer's step, a DataLoader's batch, the outermost module's call), from PyTorch's hooks
// installed by the embedded src/inject/python/step_hooks.py once `import torch` has finished. The
// runtime (FrameworkSteps) decides what they mean.
#include <Python.h>

#include <cstdio>

#include "inject/embedded_python.h"
#include "inject/run_python_embedded.h"
#include "inject/run_python_plugin.h"

namespace {

using memseal::inject::StepSignalHandler;
StepSignalHandler g_step_signal = nullptr;  // the runtime's

PyObject* reportStepSignal(PyObject*, PyObject* args) {
  int kind = 0;
  unsigned long long object = 0;
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "iKs", &kind, &object, &name)) return nullptr;
  if (g_step_signal != nullptr) g_step_signal(kind, object, name);
  Py_RETURN_NONE;
}

PyMethodDef g_report_method = {"memseal_run_step_signal", &reportStepSignal, METH_VARARGS,
                               "memseal run: one of the program's own step signals"};

// Whether `import torch` has finished: torch in sys.modules, its spec no longer _initializing.
bool torchImported() {
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (torch == nullptr) return false;
  PyObject* spec = PyObject_GetAttrString(torch, "__spec__");
  if (spec == nullptr) {
    PyErr_Clear();
    return false;
  }
  PyObject* initializing = PyObject_GetAttrString(spec, "_initializing");
  bool busy = initializing != nullptr && PyObject_IsTrue(initializing) == 1;
  if (initializing == nullptr) PyErr_Clear();
  Py_XDECREF(initializing);
  Py_DECREF(spec);
  return !busy;
}

// The hooks cannot be installed: said once on stderr, Python's error cleared.
void sayCannotWatch() {
  std::fprintf(stderr,
               "memseal run: the program's own steps cannot be watched (%s); steps come from the "
               "loops found in its ops\n",
               memseal::inject::takePythonError().c_str());
}

}  // namespace

// With the GIL held. 1: PyTorch's hooks are installed and signals go to `handler`; 0: not yet
// (torch is not imported, or still being imported); -1: they cannot be (said on stderr).
extern "C" __attribute__((visibility("default"))) int memseal_run_python_watch_steps(
    StepSignalHandler handler) {
  if (!Py_IsInitialized() || !torchImported()) return 0;
  PyObject* globals =
      memseal::inject::runEmbeddedModule(memseal::inject::embedded::kStepHooks,
                                         "/<memseal run>/step_hooks.py", "memseal_run_step_hooks");
  int installed = -1;
  if (globals != nullptr) {
    PyObject* install = PyDict_GetItemString(globals, "install");  // borrowed
    PyObject* report = PyCFunction_New(&g_report_method, nullptr);
    g_step_signal = handler;
    PyObject* done = install != nullptr && report != nullptr
                         ? PyObject_CallFunctionObjArgs(install, report, nullptr)
                         : nullptr;
    installed = done != nullptr ? 1 : -1;
    Py_XDECREF(done);
    Py_XDECREF(report);
  }
  if (installed < 0) sayCannotWatch();
  Py_XDECREF(globals);
  return installed;
}
