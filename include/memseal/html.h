// One self-contained HTML page for a leak check, a peak explanation and a fit (or the page's cards
// alone, for a notebook), and the atomic writer of report files.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "memseal/diff.h"
#include "memseal/explain.h"
#include "memseal/export.h"
#include "memseal/fit.h"
#include "memseal/leak_detector.h"
#include "memseal/merged_report.h"

namespace memseal {

// The state of a page that `memseal run --live` serves while the program runs: a line at the top
// says how the program is doing, and the page's script asks the server that served it for the
// next version (GET /page?after=VERSION) and shows it in place.
struct LivePageState {
  std::uint64_t version = 0;  // of this page; each change of the report makes a new one
  bool ended = false;         // the program has ended: this page is final, the script stops
  std::string status;  // "Running for 2 min 10 s: ...", "The program ended (exit status 0) ..."
};

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
  // Set: the page is served live (memseal run --live): its status line and the script that
  // fetches its next version; its Content-Security-Policy lets it reach the server it came from.
  const LivePageState* live = nullptr;
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
