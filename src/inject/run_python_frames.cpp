// libmemseal_run_python.so: the Python frames of allocations for `memseal run -- python ...`. It is
// the Python module's frame provider (src/python/python_frame_provider.cpp) built without the
// module: the runtime loads it only into a process that runs Python, and hands it the runtime's
// own setter, since the runtime's copy of the core is not visible to other libraries. Built for
// one Python version (the build's); another version's interpreter is left alone.
#include <Python.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "python/python_frame_provider.h"
#include "track/python_frames.h"

namespace {

using ProviderSetter = void (*)(const memseal::track::PythonFrameProvider*);
ProviderSetter g_set_provider = nullptr;
using ExitCallback = void (*)();
ExitCallback g_at_python_exit = nullptr;
using ForkCallback = void (*)();
ForkCallback g_after_fork_in_child = nullptr;

PyObject* atPythonExit(PyObject*, PyObject*) {
  // Garbage in reference cycles goes first, as the collector would free it: a build-up it frees
  // here is told as garbage (track/collected_frees.h), not as a leak still held at the end of a run
  // too short for the collector to have come round (the Python module's report does the same).
  PyGC_Collect();
  // The report at exit is made after finalisation, when code objects can no longer be read.
  memseal::python::readEveryStack();
  if (g_at_python_exit != nullptr) g_at_python_exit();
  Py_RETURN_NONE;
}

PyMethodDef g_at_python_exit_method = {"memseal_run_at_exit", &atPythonExit, METH_NOARGS,
                                       "memseal run: the last report at a step boundary"};

// atexit.register(...) of the runtime's callback. Best effort: without it, the report at exit
// falls back on the reports taken at step boundaries while the program ran.
void registerAtPythonExit() {
  PyObject* atexit_module = PyImport_ImportModule("atexit");
  PyObject* function = PyCFunction_New(&g_at_python_exit_method, nullptr);
  if (atexit_module != nullptr && function != nullptr) {
    PyObject* result = PyObject_CallMethod(atexit_module, "register", "O", function);
    Py_XDECREF(result);
  }
  Py_XDECREF(function);
  Py_XDECREF(atexit_module);
  PyErr_Clear();
}

PyObject* afterForkInChild(PyObject*, PyObject*) {
  if (g_after_fork_in_child != nullptr) g_after_fork_in_child();
  Py_RETURN_NONE;
}

PyMethodDef g_after_fork_in_child_method = {"memseal_run_after_fork_in_child", &afterForkInChild,
                                            METH_NOARGS,
                                            "memseal run: Python is ready in a forked child"};

// os.register_at_fork(after_in_child=...) of the runtime's callback: Python calls it in a child
// made by os.fork() once it has remade its GIL and thread states there.
void registerAfterForkInChild() {
  PyObject* os_module = PyImport_ImportModule("os");
  PyObject* register_at_fork =
      os_module != nullptr ? PyObject_GetAttrString(os_module, "register_at_fork") : nullptr;
  PyObject* function = PyCFunction_New(&g_after_fork_in_child_method, nullptr);
  PyObject* no_arguments = PyTuple_New(0);
  PyObject* keywords = Py_BuildValue("{s:O}", "after_in_child", function);
  if (register_at_fork != nullptr && function != nullptr && no_arguments != nullptr &&
      keywords != nullptr) {
    PyObject* result = PyObject_Call(register_at_fork, no_arguments, keywords);
    Py_XDECREF(result);
  }
  Py_XDECREF(keywords);
  Py_XDECREF(no_arguments);
  Py_XDECREF(function);
  Py_XDECREF(register_at_fork);
  Py_XDECREF(os_module);
  PyErr_Clear();
}

std::string folderOf(PyObject* module) {
  if (module == nullptr) return "";
  PyObject* file = PyObject_GetAttrString(module, "__file__");
  if (file == nullptr) {
    PyErr_Clear();
    return "";
  }
  const char* text = PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : nullptr;
  std::string path = text == nullptr ? "" : text;
  Py_DECREF(file);
  if (text == nullptr) PyErr_Clear();
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// The folders sysconfig names under `keys` ("purelib", "platlib": site-packages; "stdlib",
// "platstdlib": the standard library), each ending in '/'; none where sysconfig cannot say.
std::vector<std::string> sysconfigFolders(std::initializer_list<const char*> keys) {
  std::vector<std::string> folders;
  PyObject* sysconfig = PyImport_ImportModule("sysconfig");
  PyObject* paths =
      sysconfig != nullptr ? PyObject_CallMethod(sysconfig, "get_paths", nullptr) : nullptr;
  for (const char* key : keys) {
    PyObject* value = paths != nullptr && PyDict_Check(paths) ? PyDict_GetItemString(paths, key)
                                                              : nullptr;  // borrowed
    const char* text =
        value != nullptr && PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : nullptr;
    if (text == nullptr || *text != '/') continue;
    std::string folder = text;
    if (folder.back() != '/') folder += '/';
    folders.push_back(std::move(folder));
  }
  Py_XDECREF(paths);
  Py_XDECREF(sysconfig);
  PyErr_Clear();
  return folders;
}

bool endsWith(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Where Python frames are not the program's own, as the Python module names them
// (python/memseal/_options.py): torch's folder, the environment's site-packages (where pip puts
// transformers, Lightning, torchvision beside torch), the folder holding torch where it is another
// site-packages or dist-packages, and the standard library; longest first, since the core folds a
// frame under the first that matches.
std::vector<std::pair<std::string, std::string>> internalPaths() {
  std::vector<std::pair<std::string, std::string>> paths;
  auto add = [&paths](const std::string& folder, const char* name) {
    for (const auto& known : paths) {
      if (known.first == folder) return;
    }
    paths.emplace_back(folder, name);
  };
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  std::string torch = folderOf(PyDict_GetItemString(modules, "torch"));
  if (!torch.empty()) {
    add(torch, "torch");
    std::string parent = torch.substr(0, torch.find_last_of('/', torch.size() - 2) + 1);
    if (endsWith(parent, "site-packages/") || endsWith(parent, "dist-packages/")) {
      add(parent, "site-packages");
    }
  }
  for (const std::string& folder : sysconfigFolders({"purelib", "platlib"})) {
    add(folder, "site-packages");
  }
  std::string stdlib = folderOf(PyDict_GetItemString(modules, "os"));
  if (!stdlib.empty()) add(stdlib, "python stdlib");
  for (const std::string& folder : sysconfigFolders({"stdlib", "platstdlib"})) {
    add(folder, "python stdlib");
  }
  std::stable_sort(paths.begin(), paths.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return paths;
}

}  // namespace

namespace memseal::track {
void setPythonFrameProvider(const PythonFrameProvider* provider) {
  if (g_set_provider != nullptr) g_set_provider(provider);
}
}  // namespace memseal::track

namespace {

using CollectionHandler = void (*)(bool);
CollectionHandler g_collection = nullptr;  // the runtime's

// gc.callbacks' hook: (phase, info), phase "start" or "stop".
PyObject* reportCollection(PyObject*, PyObject* args) {
  const char* phase = nullptr;
  PyObject* info = nullptr;
  if (!PyArg_ParseTuple(args, "sO", &phase, &info)) return nullptr;
  if (g_collection != nullptr) g_collection(std::strcmp(phase, "start") == 0);
  Py_RETURN_NONE;
}

PyMethodDef g_collection_method = {"memseal_run_collection", &reportCollection, METH_VARARGS,
                                   "memseal run: a collection of the cyclic garbage collector "
                                   "starts or stops"};

// With the GIL held: appends the collection hook to gc.callbacks, so frees during a collection
// are the collector's (track/collected_frees.h). Said on stderr where it cannot be.
void watchCollections(CollectionHandler collection) {
  g_collection = collection;
  PyObject* gc = PyImport_ImportModule("gc");
  PyObject* callbacks = gc != nullptr ? PyObject_GetAttrString(gc, "callbacks") : nullptr;
  PyObject* hook = PyCFunction_New(&g_collection_method, nullptr);
  bool added = callbacks != nullptr && hook != nullptr && PyList_Append(callbacks, hook) == 0;
  if (!added) {
    PyErr_Clear();
    std::fprintf(stderr,
                 "memseal run: collections of Python's garbage collector cannot be watched; "
                 "tensors it frees are judged as if the program freed them\n");
  }
  Py_XDECREF(hook);
  Py_XDECREF(callbacks);
  Py_XDECREF(gc);
}

}  // namespace

// Returns 0 when Python frames are on; 1 when this interpreter is not the one this was built for
// or is not running. `at_python_exit` runs from Python's atexit, before the interpreter finalises;
// `after_fork_in_child` in a child of os.fork(), once Python is ready there; `collection` is told
// when a collection of the cyclic garbage collector starts (true) and stops.
extern "C" __attribute__((visibility("default"))) int memseal_run_python_start(
    ProviderSetter set_provider, ExitCallback at_python_exit, ForkCallback after_fork_in_child,
    CollectionHandler collection) {
  char built_for[16];
  std::snprintf(built_for, sizeof(built_for), "%d.%d", PY_MAJOR_VERSION, PY_MINOR_VERSION);
  const char* running = Py_GetVersion();
  std::size_t length = std::strlen(built_for);
  if (running == nullptr || std::strncmp(running, built_for, length) != 0 ||
      (running[length] >= '0' && running[length] <= '9') || !Py_IsInitialized()) {
    return 1;
  }
  g_set_provider = set_provider;
  PyGILState_STATE gil = PyGILState_Ensure();
  memseal::python::setInternalPaths(internalPaths());
  g_at_python_exit = at_python_exit;
  registerAtPythonExit();
  g_after_fork_in_child = after_fork_in_child;
  registerAfterForkInChild();
  watchCollections(collection);
  PyGILState_Release(gil);
  memseal::python::enablePythonFrames(true);
  return 0;
}
