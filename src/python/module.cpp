// memseal._memseal: the C++ core as a Python extension. It binds what the public headers offer
// (the leak detector, lifetime scopes, reports and their JSON) and installs the Python frame
// provider; policies (warn, raise, callback) and Python-only analyses (what holds a leak, garbage
// in reference cycles) live in the Python package on top, so every verdict, category, number and
// hint comes from the same code as the C++ API and `memseal check`.
#include <torch/csrc/utils/pybind.h>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "analyze/live_view.h"
#include "detect/diagnosis.h"
#include "memseal/leak_detector.h"
#include "memseal/scope.h"
#include "memseal/tracker.h"
#include "memseal/version.h"
#include "python/diff_bindings.h"
#include "python/whatif_bindings.h"
#include "python/distributed_bindings.h"
#include "python/explain_bindings.h"
#include "python/python_frame_provider.h"
#include "python/tracker_options.h"
#include "track/collected_frees.h"
#include "track/tensor_reference.h"

namespace py = pybind11;

namespace memseal::python {
namespace {

// A detector whose policy is applied by the Python package (warn to sys.stderr, raise, callback).
class Detector {
 public:
  Detector(std::uint32_t warmup, const std::vector<std::pair<std::string, std::string>>& options,
           bool watch_graph_nodes, bool watch_resident_memory) {
    DetectorOptions detector_options;
    detector_options.warmup = warmup;
    detector_options.on_leak = ReportPolicy::kNone;
    detector_options.tracker = trackerOptions(options);
    detector_options.watch_graph_nodes = watch_graph_nodes;
    detector_options.watch_resident_memory = watch_resident_memory;
    detector_ = std::make_unique<LeakDetector>(std::move(detector_options));
  }
  void step() { running().step(); }
  void phase(const std::string& name) { running().phase(name); }
  LeakReport report() const { return running().report(); }
  LeakReport finish() {
    LeakReport report = running().finish();
    detector_.reset();
    return report;
  }

 private:
  LeakDetector& running() const {
    if (!detector_) throw std::logic_error("memseal: this watch has already finished");
    return *detector_;
  }
  std::unique_ptr<LeakDetector> detector_;
};

// A detector's step boundary as a plain CPython builtin bound to it: what Watch.step becomes once
// the watch runs. A Python loop calls it right after an iteration has pushed everything else out
// of the caches, where pybind11's dispatcher (the overloads, the type lookup of `self`) and the
// package's Python wrapper cost 1-2 us of cold code beside the boundary's own 1-2 us. The function
// holds the detector's Python object: it stays callable (and raises once the watch has finished)
// however long the caller keeps it.
constexpr const char* kStepBoundaryCapsule = "memseal._memseal.Detector.step_boundary";

// Taking its arguments as METH_FASTCALL does (as cheap as METH_NOARGS: both are vectorcalls) so
// that a call with some says which function refused them: CPython's own message would name the
// bound object's type, "PyCapsule.step()".
PyObject* callStepBoundary(PyObject* capsule, PyObject* const* /*args*/, Py_ssize_t positional,
                           PyObject* keywords) {
  Py_ssize_t given = positional + (keywords == nullptr ? 0 : PyTuple_GET_SIZE(keywords));
  if (given != 0) {
    PyErr_Format(PyExc_TypeError, "memseal: Watch.step() takes no arguments (%zd given)", given);
    return nullptr;
  }
  auto* detector = static_cast<Detector*>(PyCapsule_GetPointer(capsule, kStepBoundaryCapsule));
  if (detector == nullptr) return nullptr;
  try {
    detector->step();
  } catch (...) {
    // As pybind11's dispatcher would: the same Python exception as Detector.step raises.
    py::detail::try_translate_exceptions();
    return nullptr;
  }
  Py_RETURN_NONE;
}

void releaseStepBoundaryOwner(PyObject* capsule) {
  Py_XDECREF(static_cast<PyObject*>(PyCapsule_GetContext(capsule)));
}

py::object stepBoundaryOf(const py::object& detector_object) {
  // Through void(*)(): the cast CPython's own modules use for a METH_FASTCALL function, which
  // GCC's -Wcast-function-type leaves alone.
  static PyMethodDef definition{
      "step", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&callStepBoundary)),
      METH_FASTCALL | METH_KEYWORDS, "Marks the end of one iteration."};
  auto* detector = detector_object.cast<Detector*>();
  py::object capsule = py::reinterpret_steal<py::object>(
      PyCapsule_New(detector, kStepBoundaryCapsule, &releaseStepBoundaryOwner));
  if (!capsule) throw py::error_already_set();
  if (PyCapsule_SetContext(capsule.ptr(), detector_object.ptr()) != 0) {
    throw py::error_already_set();
  }
  detector_object.inc_ref();  // released with the capsule
  PyObject* function = PyCFunction_NewEx(&definition, capsule.ptr(), nullptr);
  if (function == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(function);
}

// A lifetime scope driven by a `with` block: opened on construction, closed once.
class Scope {
 public:
  Scope(std::string name, const std::vector<std::pair<std::string, std::string>>& options) {
    ScopeOptions scope_options;
    scope_options.on_survivors = ReportPolicy::kNone;
    scope_options.tracker = trackerOptions(options);
    scope_ = std::make_unique<LifetimeScope>(std::move(name), std::move(scope_options));
  }
  void keep(const at::Tensor& tensor) { open().keep(tensor); }
  void detach(const at::Tensor& tensor) { open().detach(tensor); }
  ScopeReport close() {
    ScopeReport report = open().close();
    scope_.reset();
    return report;
  }
  // Leaves the scope without judging it (an exception is on its way out of the block).
  void abandon() { scope_.reset(); }

 private:
  LifetimeScope& open() {
    if (!scope_) throw std::logic_error("memseal: this scope is already closed");
    return *scope_;
  }
  std::unique_ptr<LifetimeScope> scope_;
};

// The report without the findings at `indices` (explained by garbage in Python reference cycles,
// which the Python package reports apart): the verdict follows what remains.
LeakReport withoutFindings(const LeakReport& report, const std::vector<std::size_t>& indices) {
  LeakReport result = report;
  result.findings.clear();
  for (std::size_t i = 0; i < report.findings.size(); ++i) {
    if (std::find(indices.begin(), indices.end(), i) == indices.end()) {
      result.findings.push_back(report.findings[i]);
    }
  }
  result.leak = !result.findings.empty();
  if (!result.leak) result.detected_at_step.reset();
  // Holders follow their findings to the new indices; those of a removed finding go with it.
  result.holders.clear();
  for (LeakHolder holder : report.holders) {
    if (holder.finding >= 0) {
      auto index = static_cast<std::size_t>(holder.finding);
      if (std::find(indices.begin(), indices.end(), index) != indices.end()) continue;
      holder.finding -= static_cast<int>(std::count_if(
          indices.begin(), indices.end(), [&](std::size_t removed) { return removed < index; }));
    }
    result.holders.push_back(std::move(holder));
  }
  return result;
}

// The report with `holders` (what Python's heap search found) in place of its own.
LeakReport withHolders(const LeakReport& report, const std::vector<LeakHolder>& holders) {
  for (const LeakHolder& holder : holders) {
    if (holder.finding < -1 || holder.finding >= static_cast<int>(report.findings.size())) {
      throw std::out_of_range("memseal: a holder names finding " + std::to_string(holder.finding) +
                              " of " + std::to_string(report.findings.size()));
    }
  }
  LeakReport result = report;
  result.holders = holders;
  return result;
}

// The report with finding `index` described by `tensor`, a live tensor Python found on one of its
// storages. The core reads a retained tensor through the op's own output, which Python code often
// wraps and drops (nn.Parameter(torch.empty(...)) makes a new tensor, requires_grad set there, on
// the op's storage): the live one tells what the storage is now, and a finding the core could only
// call tensors-retained gets its real category and hint.
LeakReport withLiveTensor(const LeakReport& report, std::size_t index, const at::Tensor& tensor) {
  if (index >= report.findings.size()) throw std::out_of_range("memseal: no finding at that index");
  LeakReport result = report;
  LeakFinding& finding = result.findings[index];
  TensorInfo live = analyze::describeSignature(track::signatureOf(tensor));
  if (!live.known) return result;
  if (tensor.device().is_cuda()) live.device = "cuda:" + std::to_string(tensor.device().index());
  finding.tensor = live;
  for (LeakPart& part : finding.parts) {
    if (part.retained != "tensor storage" || part.tensor.dtype != live.dtype) continue;
    part.tensor.known = true;
    part.tensor.requires_grad = live.requires_grad;
    part.tensor.is_leaf = live.is_leaf;
    part.tensor.grad_fn = live.grad_fn;
  }
  if (finding.category == LeakCategory::kTensorsRetained) {
    finding.category = detect::categorize(live, result.backward_ran);
  }
  finding.hint = detect::hintFor(finding);
  return result;
}

py::object optionalStep(const std::optional<std::uint32_t>& step) {
  return step ? py::object(py::int_(*step)) : py::object(py::none());
}

}  // namespace
}  // namespace memseal::python

PYBIND11_MODULE(_memseal, m) {
  using namespace memseal;
  using namespace memseal::python;
  m.doc() = "memseal's C++ core (use the memseal package, not this module)";
  // Bound to the ABI of the torch release it was built against: the package refuses another before
  // it loads this module (memseal/_torch_release.py, which says how to build memseal for it); this
  // is for the module imported by hand.
  std::string torch_version = py::str(py::module_::import("torch").attr("__version__"));
  if (torch_version.substr(0, torch_version.find('+')) != MEMSEAL_TORCH_VERSION) {
    throw py::import_error("memseal._memseal was built against torch " MEMSEAL_TORCH_VERSION
                           ", but this Python imports torch " +
                           torch_version + ": import memseal instead, which says how to build it");
  }
  m.attr("__version__") = version();
  m.attr("CHECK_REPORT_SCHEMA") = kCheckReportSchema;
  m.attr("CHECK_REPORT_VERSION") = kCheckReportVersion;
  // Frees during a collection of the cyclic garbage collector are its own: a build-up of tensors
  // in reference cycles that it frees is garbage, not a leak (track/collected_frees.h).
  m.def(
      "_collection_phase",
      [](const std::string& phase, const py::object&) {
        track::setCollectionRunning(phase == "start");
      },
      "gc.callbacks' hook: tells the tracker when a collection runs on this thread");
  py::module_::import("gc").attr("callbacks").attr("append")(m.attr("_collection_phase"));

  py::class_<StackFrame>(m, "StackFrame")
      .def_readonly("function", &StackFrame::function)
      .def_readonly("file", &StackFrame::file)
      .def_readonly("line", &StackFrame::line)
      .def_readonly("library", &StackFrame::library)
      .def_readonly("is_internal", &StackFrame::is_internal)
      .def("__repr__", [](const StackFrame& f) {
        return "<StackFrame " + f.function + " " + f.file + ":" + std::to_string(f.line) + ">";
      });
  py::class_<AllocationSite>(m, "AllocationSite")
      .def_readonly("op", &AllocationSite::op)
      .def_readonly("outer_op", &AllocationSite::outer_op)
      .def_readonly("scope", &AllocationSite::scope)
      .def_readonly("frames", &AllocationSite::frames);
  py::class_<TensorInfo>(m, "TensorInfo")
      .def_readonly("known", &TensorInfo::known)
      .def_readonly("shape", &TensorInfo::shape)
      .def_readonly("dtype", &TensorInfo::dtype)
      .def_readonly("requires_grad", &TensorInfo::requires_grad)
      .def_readonly("is_leaf", &TensorInfo::is_leaf)
      .def_readonly("grad_fn", &TensorInfo::grad_fn)
      .def_readonly("device", &TensorInfo::device);
  py::class_<ShapeRange>(m, "ShapeRange")
      .def_readonly("min", &ShapeRange::min)
      .def_readonly("max", &ShapeRange::max)
      .def_readonly("distinct", &ShapeRange::distinct);
  py::class_<LeakPart>(m, "LeakPart")
      .def_readonly("retained", &LeakPart::retained)
      .def_readonly("site", &LeakPart::site)
      .def_readonly("tensor", &LeakPart::tensor)
      .def_readonly("shapes", &LeakPart::shapes)
      .def_readonly("bytes_per_step", &LeakPart::bytes_per_step)
      .def_readonly("count_per_step", &LeakPart::count_per_step)
      .def_readonly("survivors", &LeakPart::survivors)
      .def_readonly("survivor_bytes", &LeakPart::survivor_bytes)
      .def_readonly("steps_with_survivors", &LeakPart::steps_with_survivors)
      .def_readonly("steps_observed", &LeakPart::steps_observed)
      .def_readonly("storage_addresses", &LeakPart::storage_addresses);
  py::class_<LeakFinding>(m, "LeakFinding")
      .def_property_readonly(
          "category", [](const LeakFinding& f) { return std::string(categoryId(f.category)); })
      .def_readonly("retained", &LeakFinding::retained)
      .def_readonly("bytes_per_step", &LeakFinding::bytes_per_step)
      .def_readonly("count_per_step", &LeakFinding::count_per_step)
      .def_readonly("survivors", &LeakFinding::survivors)
      .def_readonly("survivor_bytes", &LeakFinding::survivor_bytes)
      .def_readonly("steps_with_survivors", &LeakFinding::steps_with_survivors)
      .def_readonly("steps_observed", &LeakFinding::steps_observed)
      .def_readonly("site", &LeakFinding::site)
      .def_readonly("tensor", &LeakFinding::tensor)
      .def_readonly("shapes", &LeakFinding::shapes)
      .def_readonly("parts", &LeakFinding::parts)
      .def_readonly("explained_bytes_per_step", &LeakFinding::explained_bytes_per_step)
      .def_readonly("resident_bytes_per_step", &LeakFinding::resident_bytes_per_step)
      .def_readonly("hint", &LeakFinding::hint)
      .def_property_readonly("freed", [](const LeakFinding& f) -> py::object {
        return f.freed ? py::cast(*f.freed) : py::object(py::none());
      });
  py::class_<HeldUntilFreed>(m, "HeldUntilFreed")
      .def_readonly("first_step", &HeldUntilFreed::first_step)
      .def_readonly("last_step", &HeldUntilFreed::last_step)
      .def_readonly("freed_at_step", &HeldUntilFreed::freed_at_step)
      .def_readonly("times", &HeldUntilFreed::times)
      .def_readonly("steps_per_time", &HeldUntilFreed::steps_per_time)
      .def_readonly("peak_bytes", &HeldUntilFreed::peak_bytes)
      .def_readonly("phase", &HeldUntilFreed::phase)
      .def_readonly("building_up", &HeldUntilFreed::building_up)
      .def_readonly("found_after_steps", &HeldUntilFreed::found_after_steps)
      .def_readonly("iterations_per_time", &HeldUntilFreed::iterations_per_time)
      .def_readonly("by_collector", &HeldUntilFreed::by_collector);
  py::class_<PhaseSummary>(m, "PhaseSummary")
      .def_readonly("name", &PhaseSummary::name)
      .def_readonly("first_step", &PhaseSummary::first_step)
      .def_readonly("steps", &PhaseSummary::steps)
      .def_readonly("runs", &PhaseSummary::runs)
      .def_readonly("backward_ran", &PhaseSummary::backward_ran);
  py::class_<StepSample>(m, "StepSample")
      .def_readonly("step", &StepSample::step)
      .def_readonly("live_bytes", &StepSample::live_bytes)
      .def_readonly("live_count", &StepSample::live_count)
      .def_readonly("resident_bytes", &StepSample::resident_bytes)
      .def_readonly("graph_nodes_alive", &StepSample::graph_nodes_alive)
      .def_readonly("phase", &StepSample::phase);
  py::class_<LeakHolder>(m, "LeakHolder")
      .def(
          py::init([](int finding, std::string description, std::string kind, std::uint32_t tensors,
                      bool via_graph) {
            return LeakHolder{finding, std::move(description), std::move(kind), tensors, via_graph};
          }),
          py::arg("finding"), py::arg("description"), py::arg("kind"), py::arg("tensors"),
          py::arg("via_graph"))
      .def_readonly("finding", &LeakHolder::finding)
      .def_readonly("description", &LeakHolder::description)
      .def_readonly("kind", &LeakHolder::kind)
      .def_readonly("tensors", &LeakHolder::tensors)
      .def_readonly("via_graph", &LeakHolder::via_graph);
  py::class_<LeakReport>(m, "LeakReport")
      .def_readonly("leak", &LeakReport::leak)
      .def_readonly("steps", &LeakReport::steps)
      .def_readonly("warmup", &LeakReport::warmup)
      .def_property_readonly("detected_at_step",
                             [](const LeakReport& r) { return optionalStep(r.detected_at_step); })
      .def_readonly("findings", &LeakReport::findings)
      .def_readonly("per_step", &LeakReport::per_step)
      .def_readonly("backward_ran", &LeakReport::backward_ran)
      // Every note in words (the typed fields' and the free ones), as the text report gives them.
      .def_property_readonly("notes", &LeakReport::noteLines)
      .def_readonly("freed_build_ups", &LeakReport::freed_build_ups)
      .def_readonly("steps_from", &LeakReport::steps_from)
      .def_readonly("phases", &LeakReport::phases)
      .def_readonly("rank", &LeakReport::rank)
      .def_readonly("holders", &LeakReport::holders)
      .def("text", &LeakReport::toText)
      .def("to_json", &LeakReport::toJson)
      .def_static("from_json", &LeakReport::fromJson);

  py::class_<Detector>(m, "Detector")
      .def(py::init<std::uint32_t, const std::vector<std::pair<std::string, std::string>>&, bool,
                    bool>(),
           py::arg("warmup"), py::arg("options"), py::arg("watch_graph_nodes"),
           py::arg("watch_resident_memory"))
      .def("step", &Detector::step)
      .def_property_readonly("step_boundary", &stepBoundaryOf)
      .def("phase", &Detector::phase, py::arg("name"))
      .def("report", &Detector::report)
      .def("finish", &Detector::finish);

  py::class_<LiveAllocation>(m, "LiveAllocation")
      .def_readonly("bytes", &LiveAllocation::bytes)
      .def_readonly("step", &LiveAllocation::step)
      .def_readonly("grad_mode", &LiveAllocation::grad_mode)
      .def_readonly("inference_mode", &LiveAllocation::inference_mode)
      .def_readonly("tensor", &LiveAllocation::tensor);
  py::class_<ScopeStats>(m, "ScopeStats")
      .def_readonly("made", &ScopeStats::made)
      .def_readonly("made_bytes", &ScopeStats::made_bytes)
      .def_readonly("freed", &ScopeStats::freed)
      .def_readonly("kept", &ScopeStats::kept)
      .def_readonly("kept_bytes", &ScopeStats::kept_bytes)
      .def_readonly("survivors", &ScopeStats::survivors)
      .def_readonly("survivor_bytes", &ScopeStats::survivor_bytes);
  py::class_<ScopeSurvivor>(m, "ScopeSurvivor")
      .def_readonly("site", &ScopeSurvivor::site)
      .def_readonly("allocation", &ScopeSurvivor::allocation);
  py::class_<ScopeReport>(m, "ScopeReport")
      .def_readonly("name", &ScopeReport::name)
      .def_readonly("stats", &ScopeReport::stats)
      .def_readonly("survivors", &ScopeReport::survivors)
      .def_property_readonly("clean", &ScopeReport::clean)
      .def("text", &ScopeReport::toText);
  py::class_<Scope>(m, "Scope")
      .def(py::init<std::string, const std::vector<std::pair<std::string, std::string>>&>(),
           py::arg("name"), py::arg("options"))
      .def("keep", &Scope::keep)
      .def("detach", &Scope::detach)
      .def("close", &Scope::close)
      .def("abandon", &Scope::abandon);

  m.def("with_live_tensor", &withLiveTensor, py::arg("report"), py::arg("index"),
        py::arg("tensor"));
  m.def("without_findings", &withoutFindings, py::arg("report"), py::arg("indices"));
  m.def("with_holders", &withHolders, py::arg("report"), py::arg("holders"));
  m.def(
      "check_options",
      [](const std::vector<std::pair<std::string, std::string>>& options) {
        trackerOptions(options).resolved();  // reads MEMSEAL_* too; ValueError names what is wrong
      },
      py::arg("options"));
  m.def("tracking_active", &trackingActive);
  m.def("option_values", &TrackerOptions::expectedValues, py::arg("name"));
  m.def("enable_python_frames", &enablePythonFrames, py::arg("on"));
  m.def("set_internal_paths", &setInternalPaths, py::arg("prefixes"));
  bindExplain(m);
  bindDistributed(m);
  bindDiff(m);
  bindWhatIf(m);
}
