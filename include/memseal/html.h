// One self-contained HTML page for a leak check, a peak explanation and a fit (or the page's cards
// alone, for a notebook), and the atomic writer of report files.
#pragma once

#include <map>
#include <string>

#include "memseal/diff.h"
#include "memseal/explain.h"
#include "memseal/export.h"
#include "memseal/fit.h"
#include "memseal/leak_detector.h"
#include "memseal/merged_report.h"

namespace memseal {

struct HtmlPage {
  std::string title;  // the case or script
  const LeakReport* check = nullptr;
  const PeakReport* explain = nullptr;
  const FitReport* fit = nullptr;
  std::string check_json;  // used instead of `check` when set (e.g. the Python module's report)
  const MergedReport* merged = nullptr;  // a distributed job's ranks side by side
  // Each rank's own page, linked from its row of the merged view: a path relative to where this
  // page is written (memseal run's rank-N.html beside merged.html).
  std::map<int, std::string> rank_pages{};
  const ReportDiff* diff = nullptr;  // two runs compared
};

// Writes a report file whole: beside `path`, then renamed, so a failed write never leaves half a
// file nor replaces a good one. Throws std::runtime_error("cannot write PATH: reason").
MEMSEAL_API void writeReportFile(const std::string& path, const std::string& content);

// One self-contained HTML file: no network, every string from the program escaped.
MEMSEAL_API std::string renderHtml(const HtmlPage& page);
// Writes it beside `path` and renames; throws std::runtime_error naming the path on failure.
MEMSEAL_API void writeHtml(const HtmlPage& page, const std::string& path);
// The page's cards without the page around them (a <div> with a style that applies only inside
// it, no script), for a notebook's output cell.
MEMSEAL_API std::string renderHtmlFragment(const HtmlPage& page);

// Each rank's own page for a merged view (HtmlPage::rank_pages): for a rank read from FILE.json,
// FILE.html where it exists (memseal run's job folder).
MEMSEAL_API std::map<int, std::string> rankPagesBesideReports(const MergedReport& merged);
// `pages` (paths from here) as links from a page written at `html_path`: relative to its folder,
// percent-encoded where a path holds what a URL cannot.
MEMSEAL_API std::map<int, std::string> pageLinksFrom(const std::string& html_path,
                                                     const std::map<int, std::string>& pages);

}  // namespace memseal
