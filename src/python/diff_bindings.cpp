// Two reports compared for Python, from the same core as `memseal diff` and `--baseline`.
#include "python/diff_bindings.h"

#include <pybind11/stl.h>

#include <string>

#include "memseal/diff.h"
#include "memseal/html.h"

namespace py = pybind11;

namespace memseal::python {

namespace {

DiffOptions diffOptions(const std::string& before_label, const std::string& after_label,
                        bool force) {
  DiffOptions options;
  options.before_label = before_label;
  options.after_label = after_label;
  options.force = force;
  return options;
}

HtmlPage diffPage(const std::string& title, const ReportDiff& diff) {
  HtmlPage page;
  page.title = title;
  page.diff = &diff;
  return page;
}

}  // namespace

void bindDiff(py::module_& m) {
  m.attr("DIFF_REPORT_SCHEMA") = kDiffReportSchema;
  m.attr("DIFF_REPORT_VERSION") = kDiffReportVersion;
  py::class_<ReportDiff>(m, "ReportDiff")
      .def_readonly("kind", &ReportDiff::kind)
      .def_property_readonly("empty", &ReportDiff::empty)
      .def("text", &ReportDiff::toText)
      .def("to_json", &ReportDiff::toJson)
      .def("html", [](const ReportDiff& diff,
                      const std::string& title) { return renderHtml(diffPage(title, diff)); })
      .def("html_fragment", [](const ReportDiff& diff, const std::string& title) {
        return renderHtmlFragment(diffPage(title, diff));
      });
  m.def(
      "diff_reports",
      [](const std::string& before, const std::string& after, const std::string& before_label,
         const std::string& after_label, bool force) {
        return diffReports(before, after, diffOptions(before_label, after_label, force));
      },
      py::arg("before"), py::arg("after"), py::arg("before_label"), py::arg("after_label"),
      py::arg("force") = false);
  // (passed, failures, summary, diff)
  m.def(
      "check_against_baseline",
      [](const std::string& baseline, const std::string& report, double tolerance,
         const std::string& before_label, const std::string& after_label) {
        BaselineCheck held = checkAgainstBaseline(baseline, report, tolerance,
                                                  diffOptions(before_label, after_label, false));
        return py::make_tuple(held.passed, held.failures, held.summary, std::move(held.diff));
      },
      py::arg("baseline"), py::arg("report"), py::arg("tolerance"), py::arg("before_label"),
      py::arg("after_label"));
  m.def("parse_tolerance", &parseTolerance, py::arg("text"));
}

}  // namespace memseal::python
