// Explain, capacity, the memory_viz trace and the HTML page for Python: the same core functions as
// the C++ API and `memseal explain|fit`, with Python callables as steps and role sources, and the
// module scopes the package's forward hooks open so activations are attributed to modules.
#include "python/explain_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <deque>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "memseal/explain.h"
#include "memseal/tracker.h"
#include "python/tracker_options.h"

namespace py = pybind11;

namespace memseal::python {

namespace {

// MEMSEAL_REGION names must outlive their scope: module paths are interned for the process (a
// model has a bounded set of them).
const char* internedName(const std::string& name) {
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  return names->insert(name).first->c_str();
}

// Ctrl-C (or SystemExit) in a Python step must stop fit, not be reported as the step failing at
// the verified size: it crosses the C++ core as a type that is no std::exception.
struct Interrupted {};

std::function<void(std::int64_t, int)> interruptible(std::function<void(std::int64_t, int)> step) {
  return [step = std::move(step)](std::int64_t size, int i) {
    try {
      step(size, i);
    } catch (py::error_already_set& error) {
      if (error.matches(PyExc_KeyboardInterrupt) || error.matches(PyExc_SystemExit)) {
        error.restore();
        throw Interrupted{};
      }
      throw;
    }
  };
}

// A module's forward, as a MEMSEAL_REGION: opened by the forward pre-hook, closed by the forward
// hook (always_call, so an exception closes it too). Scopes nest per thread, like forwards.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name) : guard_(internedName(name)) {}

 private:
  RegionGuard guard_;
};

}  // namespace

void bindExplain(py::module_& m) {
  py::class_<PeakReport>(m, "PeakReport")
      .def_readonly("peak_bytes", &PeakReport::peak_bytes)
      .def_readonly("baseline_bytes", &PeakReport::baseline_bytes)
      .def_readonly("end_bytes", &PeakReport::end_bytes)
      .def_readonly("peak_step", &PeakReport::peak_step)
      .def("bytes_of",
           [](const PeakReport& report, const std::string& role) {
             for (const RoleBytes& entry : report.roles) {
               if (role == roleId(entry.role)) return entry.bytes;
             }
             throw py::value_error("memseal: no role '" + role +
                                   "' (parameters, gradients, optimizer_state, activations, "
                                   "temporaries, other)");
           })
      .def("text", &PeakReport::toText)
      .def("to_json", &PeakReport::toJson);

  py::class_<FitReport>(m, "FitReport")
      .def_readonly("model", &FitReport::model)
      .def_readonly("is_linear", &FitReport::is_linear)
      .def_readonly("predicted_max_size", &FitReport::predicted_max_size)
      .def_readonly("predicted_peak_bytes", &FitReport::predicted_peak_bytes)
      .def_readonly("refusal", &FitReport::refusal)
      .def("predict_peak", &FitReport::predictPeak, py::arg("size"))
      .def("largest_size", &FitReport::largestSize)
      .def("text", &FitReport::toText)
      .def("to_json", &FitReport::toJson);

  // The tensors of each role, then the module path that owns each of them (as RoleTensors).
  using RoleLists =
      std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
                 std::vector<std::string>, std::vector<std::string>, std::vector<std::string>>;
  m.def(
      "explain_peak",
      [](const std::function<void(int)>& step, std::uint32_t steps, std::uint32_t warmup,
         const std::vector<std::pair<std::string, std::string>>& options,
         const std::optional<std::function<RoleLists()>>& roles) {
        ExplainOptions explain;
        explain.steps = steps;
        explain.warmup = warmup;
        explain.tracker = trackerOptions(options);
        if (roles) {
          explain.roles = [roles] {
            py::gil_scoped_acquire gil;
            auto [parameters, gradients, state, parameter_modules, gradient_modules,
                  state_modules] = (*roles)();
            return RoleTensors{std::move(parameters),
                               std::move(gradients),
                               std::move(state),
                               std::move(parameter_modules),
                               std::move(gradient_modules),
                               std::move(state_modules)};
          };
        }
        return explainPeak(step, explain);
      },
      py::arg("step"), py::arg("steps"), py::arg("warmup"), py::arg("options"),
      py::arg("roles") = py::none());

  auto fitOptions = [](std::optional<std::int64_t> budget, double margin, double tolerance,
                       bool verify, std::uint32_t warmup) {
    FitOptions fit;
    fit.budget_bytes = budget;
    fit.margin = margin;
    fit.tolerance = tolerance;
    fit.verify = verify;
    fit.warmup_steps = warmup;
    return fit;
  };
  m.def(
      "fit_capacity",
      [fitOptions](const std::function<void(std::int64_t, int)>& step,
                   const std::vector<std::int64_t>& sizes, std::optional<std::int64_t> budget,
                   double margin, double tolerance, bool verify, std::uint32_t warmup, int device) {
        FitOptions fit = fitOptions(budget, margin, tolerance, verify, warmup);
        fit.sizes = sizes;
        fit.device = device;
        try {
          return fitCapacity(interruptible(step), fit);
        } catch (const Interrupted&) {
          throw py::error_already_set();  // the interrupt, as Python raised it
        }
      },
      py::arg("step"), py::arg("sizes"), py::arg("budget"), py::arg("margin"), py::arg("tolerance"),
      py::arg("verify"), py::arg("warmup"), py::arg("device") = -1);
  m.def(
      "fit_peaks",
      [fitOptions](
          const std::vector<std::tuple<std::int64_t, std::int64_t,
                                       std::vector<std::pair<std::string, std::int64_t>>>>& points,
          std::optional<std::int64_t> budget, double margin, double tolerance) {
        std::vector<FitPoint> fit_points;
        for (const auto& [size, peak, phases] : points) {
          FitPoint point{size, peak, {}};
          for (const auto& [name, bytes] : phases) point.phases.push_back({name, bytes});
          fit_points.push_back(std::move(point));
        }
        return fitPeaks(fit_points, fitOptions(budget, margin, tolerance, false, 0));
      },
      py::arg("points"), py::arg("budget"), py::arg("margin"), py::arg("tolerance"));
  m.def("parse_byte_size", &parseByteSize, py::arg("text"));
  m.def("parse_fit_memory", &parseFitMemory, py::arg("memory"));
  m.def("available_memory_bytes", &availableMemoryBytes);

  py::class_<MemoryTrace>(m, "MemoryTrace")
      .def(py::init<std::size_t>(), py::arg("max_events"))
      .def("start", &MemoryTrace::start)
      .def("stop", &MemoryTrace::stop)
      .def_property_readonly("allocations", &MemoryTrace::allocations)
      .def_property_readonly("frees", &MemoryTrace::frees)
      .def_property_readonly("dropped", &MemoryTrace::dropped)
      .def_property_readonly("live_bytes", &MemoryTrace::liveBytes)
      .def_property_readonly("live_count", &MemoryTrace::liveCount)
      .def("memory_viz_pickle",
           [](MemoryTrace& trace) { return py::bytes(trace.memoryVizPickle()); })
      .def("write_memory_viz", &MemoryTrace::writeMemoryViz, py::arg("path"));

  // The reports as one page, or as its cards alone (a notebook's _repr_html_).
  auto page_of = [](const std::string& title, const std::string& check_json,
                    const PeakReport* explain, const FitReport* fit) {
    HtmlPage page;
    page.title = title;
    page.check_json = check_json;
    page.explain = explain;
    page.fit = fit;
    return page;
  };
  m.def(
      "render_html",
      [page_of](const std::string& title, const std::string& check_json, const PeakReport* explain,
                const FitReport* fit) {
        return renderHtml(page_of(title, check_json, explain, fit));
      },
      py::arg("title"), py::arg("check_json"), py::arg("explain") = nullptr,
      py::arg("fit") = nullptr);
  m.def(
      "render_html_fragment",
      [page_of](const std::string& title, const std::string& check_json, const PeakReport* explain,
                const FitReport* fit) {
        return renderHtmlFragment(page_of(title, check_json, explain, fit));
      },
      py::arg("title"), py::arg("check_json"), py::arg("explain") = nullptr,
      py::arg("fit") = nullptr);
  m.def("write_report_file", &writeReportFile, py::arg("path"), py::arg("content"));

  py::class_<ModuleScope>(m, "ModuleScope").def(py::init<const std::string&>(), py::arg("name"));
}

}  // namespace memseal::python
