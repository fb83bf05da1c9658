#include "inject/run_python_embedded.h"

namespace memseal::inject {

PyObject* runEmbeddedModule(const char* source, const char* file_name, const char* module_name,
                            const std::vector<std::pair<const char*, const char*>>& strings) {
  PyObject* globals = PyDict_New();
  if (globals == nullptr) return nullptr;
  bool ready = PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) == 0;
  std::vector<std::pair<const char*, const char*>> named = strings;
  named.emplace_back("__name__", module_name);
  named.emplace_back("__file__", file_name);
  for (const auto& [name, text] : named) {
    PyObject* value = ready ? PyUnicode_FromString(text) : nullptr;
    ready = value != nullptr && PyDict_SetItemString(globals, name, value) == 0;
    Py_XDECREF(value);
  }
  PyObject* code = ready ? Py_CompileString(source, file_name, Py_file_input) : nullptr;
  PyObject* result = code != nullptr ? PyEval_EvalCode(code, globals, globals) : nullptr;
  Py_XDECREF(code);
  if (result == nullptr) {
    Py_DECREF(globals);
    return nullptr;
  }
  Py_DECREF(result);
  return globals;
}

std::string takePythonError() {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* text = value != nullptr ? PyObject_Str(value) : nullptr;
  const char* what = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
  std::string said = what != nullptr ? what : "unknown error";
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return said;
}

}  // namespace memseal::inject
