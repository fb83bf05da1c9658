#include "python/python_frame_provider.h"

#include <Python.h>
#include <frameobject.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "common/text.h"
#include "track/hashing.h"
#include "track/insert_only_table.h"
#include "track/python_frames.h"

namespace memseal::python {

namespace {

constexpr int kMaxPythonFrames = 32;

struct PythonFrameRef {
  PyCodeObject* code;
  std::int64_t last_instruction;  // byte offset, as PyFrame_GetLasti gives it (no padding: memcmp)
};

struct PythonStack {
  int depth = 0;
  PythonFrameRef frames[kMaxPythonFrames];
};

// A frame's text as its code object gave it.
struct FrameText {
  std::string file;  // normalised
  std::string function;
  int line = 0;
};

struct PythonStackEntry {
  PythonStack stack;
  // The frames' texts, read the first time a report names the stack (and for every stack as the
  // program's code ends: readEveryStack), then kept: a report made after the interpreter began to
  // finalise (the report at exit) can no longer read code objects, and without the lines a stack
  // names it would group and name its findings otherwise than the reports made while it ran.
  // Written once under the GIL, read without it.
  std::atomic<const std::vector<FrameText>*> texts{nullptr};
  bool matches(const PythonStack& other) const {
    return stack.depth == other.depth &&
           std::memcmp(stack.frames, other.frames,
                       sizeof(PythonFrameRef) * static_cast<std::size_t>(other.depth)) == 0;
  }
};

// 4096 distinct Python stacks (about 2 MiB). A stack's code objects are kept alive from its first
// capture on, so a report can still name them after their function is gone.
using PythonStackTable = track::InsertOnlyTable<PythonStackEntry, 4096>;

PythonStackTable& stackTable() {
  static auto* table = new PythonStackTable();  // never destroyed: ids stay valid for the process
  return *table;
}

std::mutex g_internal_paths_mutex;
std::vector<std::pair<std::string, std::string>> g_internal_paths;

bool interpreterUsable() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsFinalizing();
#else
  return !_Py_IsFinalizing();
#endif
}

std::uint32_t capture() {
  // Threads that never ran Python code (libtorch's intra-op workers) have no Python stack; taking
  // the GIL there could wait on a thread that waits for them.
  if (!interpreterUsable() || PyGILState_GetThisThreadState() == nullptr) return 0;
  // libtorch's bindings release the GIL around ops; take it back to read this thread's frames,
  // as CapturedTraceback does.
  PyGILState_STATE gil = PyGILState_Ensure();
  PythonStack stack;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr && stack.depth < kMaxPythonFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    stack.frames[stack.depth++] = PythonFrameRef{code, PyFrame_GetLasti(frame)};
    Py_DECREF(code);  // the frame holds it; the table takes its own reference below
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  std::uint32_t id = 0;
  if (stack.depth > 0) {
    std::uint64_t hash = static_cast<std::uint64_t>(stack.depth);
    for (int i = 0; i < stack.depth; ++i) {
      hash = track::combineHash(hash, reinterpret_cast<std::uintptr_t>(stack.frames[i].code));
      hash = track::combineHash(hash, static_cast<std::uint64_t>(stack.frames[i].last_instruction));
    }
    id = stackTable().findOrInsert(hash, stack, [&](PythonStackEntry& entry) {
      entry.stack = stack;
      for (int i = 0; i < stack.depth; ++i) Py_INCREF(stack.frames[i].code);
    });
  }
  PyGILState_Release(gil);
  return id;
}

std::string attributeText(PyObject* object, const char* name) {
  PyObject* value = PyObject_GetAttrString(object, name);
  std::string text;
  if (value != nullptr && PyUnicode_Check(value)) {
    const char* utf8 = PyUnicode_AsUTF8(value);
    if (utf8 != nullptr) text = utf8;
  }
  Py_XDECREF(value);
  PyErr_Clear();
  return text;
}

// With the GIL held: the entry's texts, read from its code objects the first time.
const std::vector<FrameText>* textsOf(PythonStackEntry& entry) {
  if (const std::vector<FrameText>* texts = entry.texts.load(std::memory_order_acquire)) {
    return texts;
  }
  auto* texts = new std::vector<FrameText>();  // kept for the process, as the stack's id is
  for (int i = 0; i < entry.stack.depth; ++i) {
    PyCodeObject* code = entry.stack.frames[i].code;
    FrameText text;
    text.file = common::normalPath(attributeText(reinterpret_cast<PyObject*>(code), "co_filename"));
    text.function = attributeText(reinterpret_cast<PyObject*>(code), "co_qualname");
    text.line = PyCode_Addr2Line(code, static_cast<int>(entry.stack.frames[i].last_instruction));
    texts->push_back(std::move(text));
  }
  const std::vector<FrameText>* expected = nullptr;
  if (!entry.texts.compare_exchange_strong(expected, texts, std::memory_order_acq_rel)) {
    delete texts;  // read by another thread between the GIL's hand-overs
    return expected;
  }
  return texts;
}

void symbolize(std::uint32_t python_stack, std::vector<StackFrame>& frames) {
  if (python_stack == 0) return;
  PythonStackEntry& entry = stackTable().at(python_stack);
  const std::vector<FrameText>* texts = entry.texts.load(std::memory_order_acquire);
  if (texts == nullptr) {
    if (!interpreterUsable()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    texts = textsOf(entry);
    PyGILState_Release(gil);
  }
  std::vector<std::pair<std::string, std::string>> internal_paths;
  {
    std::lock_guard<std::mutex> lock(g_internal_paths_mutex);
    internal_paths = g_internal_paths;
  }
  for (const FrameText& text : *texts) {
    StackFrame frame;
    frame.file = text.file;
    frame.function = text.function;
    frame.line = text.line;
    frame.library = "python";
    if (frame.file.rfind("<frozen", 0) == 0) {
      frame.is_internal = true;
      frame.library = "python stdlib";
    }
    for (const auto& [prefix, name] : internal_paths) {
      if (frame.file.rfind(prefix, 0) == 0) {
        frame.is_internal = true;
        frame.library = name;
        break;
      }
    }
    frames.push_back(std::move(frame));
  }
}

bool symbolizesWithoutWaiting() { return !interpreterUsable() || PyGILState_Check() != 0; }

const track::PythonFrameProvider kProvider{&capture, &symbolize, &symbolizesWithoutWaiting};

}  // namespace

void enablePythonFrames(bool on) { track::setPythonFrameProvider(on ? &kProvider : nullptr); }

void readEveryStack() {
  if (!interpreterUsable()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  stackTable().forEach([](std::uint32_t, PythonStackEntry& entry) { textsOf(entry); });
  PyGILState_Release(gil);
}

void setInternalPaths(std::vector<std::pair<std::string, std::string>> prefixes) {
  // Compared with normalised file names: normalised the same way (a folder keeps its last slash).
  for (auto& [prefix, name] : prefixes) {
    bool folder = !prefix.empty() && prefix.back() == '/';
    prefix = common::normalPath(prefix);
    if (folder && (prefix.empty() || prefix.back() != '/')) prefix += '/';
  }
  std::lock_guard<std::mutex> lock(g_internal_paths_mutex);
  g_internal_paths = std::move(prefixes);
}

}  // namespace memseal::python
