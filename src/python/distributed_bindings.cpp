// A distributed job's ranks for Python: the rank a report is of, and the merged view of the ranks'
// reports (memseal.merge, and Watch(gather=True) on rank 0), from the same core as `memseal merge`.
#include "python/distributed_bindings.h"

#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "memseal/html.h"
#include "memseal/merged_report.h"

namespace py = pybind11;

namespace memseal::python {

namespace {

HtmlPage mergedPage(const MergedReport& merged, const std::string& title) {
  HtmlPage page;
  page.title = title;
  page.merged = &merged;
  return page;
}

// (json, source) pairs: each a memseal.check report, its own rank where it names one; and the
// ranks known to be missing as (rank, world size, why). Reports of several jobs are refused
// (std::invalid_argument, as otherJobs says) unless `force`.
MergedReport mergeJson(const std::vector<std::pair<std::string, std::string>>& reports,
                       const std::vector<std::tuple<int, int, std::string>>& missing, bool force) {
  std::vector<RankReport> ranks;
  for (const auto& [rank, world_size, why] : missing) {
    RankReport absent;
    absent.identity = RankIdentity{rank, rank, world_size, ""};
    absent.missing_reason = why;
    ranks.push_back(std::move(absent));
  }
  for (const auto& [json, source] : reports) {
    try {
      ranks.push_back(rankReportFromJson(json, source));
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(source + ": " + error.what());
    }
  }
  if (std::string why = otherJobs(ranks); !why.empty() && !force) {
    throw std::invalid_argument(why + ", or force=True to merge them anyway");
  }
  return mergeRankReports(ranks);
}

// The merged view: its parts, its text and JSON, its page and its cards for a notebook.
void bindMergedReport(py::module_& m) {
  py::class_<MergedReport>(m, "MergedReport")
      .def_readonly("world_size", &MergedReport::world_size)
      .def_readonly("ranks", &MergedReport::ranks)
      .def_readonly("findings", &MergedReport::findings)
      .def_readonly("notes", &MergedReport::notes)
      .def_property_readonly("leak", &MergedReport::leak)
      .def("text", &MergedReport::toText)
      .def("to_json", &MergedReport::toJson)
      .def("__str__", &MergedReport::toText)
      .def(
          "write_html",
          [](const MergedReport& merged, const py::object& path_like, const std::string& title) {
            std::string path = py::str(py::module_::import("os").attr("fspath")(path_like));
            // A rank read from FILE.json links FILE.html, where memseal run wrote one beside it.
            HtmlPage page = mergedPage(merged, title);
            page.rank_pages = pageLinksFrom(path, rankPagesBesideReports(merged));
            writeReportFile(path, renderHtml(page));
          },
          py::arg("path"), py::arg("title") = "job of ranks",
          "The merged view as one self-contained HTML page at `path` (written whole, or not at "
          "all)")
      .def(
          "_repr_html_",
          [](const MergedReport& merged) {
            return renderHtmlFragment(mergedPage(merged, "job of ranks"));
          },
          "The merged view's cards without a page around them: how Jupyter shows it");
}

}  // namespace

void bindDistributed(py::module_& m) {
  py::class_<RankIdentity>(m, "RankIdentity")
      .def(py::init([](int rank, int local_rank, int world_size, std::string run_id) {
             if (world_size < 1 || rank < 0 || rank >= world_size) {
               throw py::value_error("memseal: rank " + std::to_string(rank) +
                                     " is not a rank of a job of " + std::to_string(world_size));
             }
             return RankIdentity{rank, local_rank, world_size, std::move(run_id)};
           }),
           py::arg("rank"), py::arg("local_rank"), py::arg("world_size"), py::arg("run_id") = "")
      .def_readonly("rank", &RankIdentity::rank)
      .def_readonly("local_rank", &RankIdentity::local_rank)
      .def_readonly("world_size", &RankIdentity::world_size)
      .def_readonly("run_id", &RankIdentity::run_id)
      // A job across machines: the rank's node (torchrun's GROUP_RANK) and how many; 1 node else.
      .def_readonly("node", &RankIdentity::node)
      .def_readonly("nodes", &RankIdentity::nodes);
  m.def("rank_from_environment", &rankFromEnvironment);
  m.def("set_report_rank",
        [](LeakReport& report, const RankIdentity& rank) { report.rank = rank; });

  py::class_<RankPeak>(m, "RankPeak")
      .def_readonly("peak_bytes", &RankPeak::peak_bytes)
      .def_readonly("peak_step", &RankPeak::peak_step)
      .def_readonly("top_role", &RankPeak::top_role)
      .def_readonly("top_role_bytes", &RankPeak::top_role_bytes)
      .def_property_readonly("roles", [](const RankPeak& peak) {
        // {role: bytes at the peak}, in the order explain wrote them.
        py::dict roles;
        for (const auto& [name, bytes] : peak.roles) roles[py::str(name)] = bytes;
        return roles;
      });
  py::class_<RankSummary>(m, "RankSummary")
      .def_readonly("identity", &RankSummary::identity)
      .def_property_readonly("rank", [](const RankSummary& r) { return r.identity.rank; })
      .def_property_readonly("status", [](const RankSummary& r) { return rankStatusId(r.status); })
      .def_readonly("source", &RankSummary::source)
      .def_readonly("steps", &RankSummary::steps)
      .def_readonly("warmup", &RankSummary::warmup)
      .def_readonly("findings", &RankSummary::findings)
      .def_readonly("peak_live_bytes", &RankSummary::peak_live_bytes)
      .def_readonly("peak_reserved_bytes", &RankSummary::peak_reserved_bytes)
      .def_readonly("explained_peak", &RankSummary::explained_peak)
      .def_readonly("missing_reason", &RankSummary::missing_reason);
  py::class_<MergedFinding>(m, "MergedFinding")
      .def_property_readonly("category",
                             [](const MergedFinding& f) { return categoryId(f.category); })
      .def_readonly("op", &MergedFinding::op)
      .def_readonly("site", &MergedFinding::site)
      .def_readonly("ranks", &MergedFinding::ranks)
      .def_readonly("bytes_per_step", &MergedFinding::bytes_per_step)
      .def_readonly("every_reporting_rank", &MergedFinding::everyReportingRank)
      .def_readonly("example", &MergedFinding::example);
  bindMergedReport(m);
  m.def("merge_json", &mergeJson, py::arg("reports"),
        py::arg("missing") = std::vector<std::tuple<int, int, std::string>>{},
        py::arg("force") = false);
}

}  // namespace memseal::python
