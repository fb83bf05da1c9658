// The comparison of two reports (memseal.diff/1): the peak before and after, both runs' timelines
// on one axis, what moved the peak dimension by dimension, the leak causes new, gone or changed,
// the capacity, and what makes the comparison less than exact.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "report/html/html_text.h"
#include "report/html/sections.h"
#include "report/html/svg_chart.h"
#include "report/html_report.h"

namespace memseal::report::html {

namespace {

constexpr std::size_t kRowsPerDimension = 12;

std::string signedBytesText(double bytes) {
  if (bytes == 0) return "0 B";
  return std::string(bytes > 0 ? "+" : "&#8722;") + bytesText(std::fabs(bytes));
}

std::vector<Point> timelinePoints(const ReadJson& side) {
  return pointsOf(arrayAt(side, "timeline"), "x", "bytes");
}

std::string bothTimelinesChart(const ReadJson& diff) {
  constexpr int kWidth = 960, kHeight = 300;
  const Plot plot{84, 24, kWidth - 24.0, kHeight - 48.0};
  std::string svg = svgOpen("diff-timeline-chart", kWidth, kHeight, "Both runs on one axis");
  std::vector<Point> before = timelinePoints(member(diff, "before"));
  std::vector<Point> after = timelinePoints(member(diff, "after"));
  if (before.empty() && after.empty()) {
    return svg + svgEmpty(plot, "no timeline in these reports") + "</svg>";
  }
  double first = 1e300, last = -1e300, hi = 0;
  for (const auto* points : {&before, &after}) {
    for (const Point& point : *points) {
      first = std::min(first, point.first);
      last = std::max(last, point.first);
      hi = std::max(hi, point.second);
    }
  }
  last = std::max(last, first + 1);
  ByteTicks y_ticks = byteTicks(0, std::max(hi, 1024.0), 5);
  Scale x{first, last, plot.left, plot.right};
  Scale y{y_ticks.ticks.lo, y_ticks.ticks.hi, plot.bottom, plot.top};
  Ticks x_ticks = ticksWithin(first, last, 10);
  std::string axis = textAt(diff, "timeline_axis");
  drawXAxis(svg, plot, x, x_ticks, compactNumber, axis.empty() ? "step" : axis.c_str());
  drawYAxis(
      svg, plot, y, y_ticks.ticks, [&](double value) { return byteTickLabel(value, y_ticks); },
      "tracked bytes", false, "tick");
  svg += polyline(before, x, y, "before-line");
  svg += polyline(after, x, y, "live");
  return svg + "</svg>";
}

std::string breakdownCard(const ReadJson& breakdown) {
  const ReadJson& entries = arrayAt(breakdown, "entries");
  if (entries.empty()) return "";
  bool additive = flagAt(breakdown, "additive").value_or(true);
  std::string dimension = textAt(breakdown, "dimension");
  std::string out = "<div class=\"card\"><h3>" + std::string(additive ? "By " : "Peak per ") +
                    escapeHtml(dimension) +
                    "</h3><div class=\"table-wrap\"><table class=\"compact\"><thead><tr><th>" +
                    escapeHtml(dimension) +
                    "</th><th class=\"num\">before</th><th class=\"num\">after</th>"
                    "<th class=\"num\">change</th></tr></thead><tbody>";
  double rest_before = 0, rest_after = 0;
  std::size_t rest = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    double before = numberOr(entries[i], "before", 0), after = numberOr(entries[i], "after", 0);
    if (i >= kRowsPerDimension && additive) {
      rest_before += before;
      rest_after += after;
      ++rest;
      continue;
    }
    out += "<tr>" + cell(codeText(textAt(entries[i], "key"))) + numCell(bytesText(before)) +
           numCell(bytesText(after)) + numCell(signedBytesText(after - before)) + "</tr>";
  }
  if (rest > 0) {
    out += "<tr>" + cell(muted(countText(double(rest)) + " more")) +
           numCell(bytesText(rest_before)) + numCell(bytesText(rest_after)) +
           numCell(signedBytesText(rest_after - rest_before)) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string causeRateHtml(const ReadJson& cause, const char* key) {
  return bytesText(numberOr(cause, key, 0)) + "/step";
}

std::string causesCard(const ReadJson& diff) {
  const ReadJson& causes = arrayAt(diff, "causes");
  if (causes.empty()) return "";
  std::string out =
      "<div class=\"card\"><h3>Leak causes</h3><div class=\"table-wrap\"><table class=\"compact\">"
      "<thead><tr><th>change</th><th>cause</th><th>where</th><th class=\"num\">before</th>"
      "<th class=\"num\">after</th></tr></thead><tbody>";
  for (const ReadJson& cause : causes) {
    std::string change = textAt(cause, "change");
    const char* pill = change == "new" || change == "grown" ? "leak"
                       : change == "gone"                   ? "no_leak"
                                                            : "";
    std::string where = codeText(textAt(cause, "site"));
    if (!textAt(cause, "holder").empty()) {
      where += "<br>" + muted("kept by " + escapeHtml(textAt(cause, "holder")));
    }
    out += "<tr><td><span class=\"pill " + std::string(pill) + "\">" + escapeHtml(change) +
           "</span></td>" +
           cell(escapeHtml(textAt(cause, "category")) + " " + codeText(textAt(cause, "op"))) +
           cell(where) +
           numCell(change == "new" ? kDash : causeRateHtml(cause, "before_bytes_per_step")) +
           numCell(change == "gone" ? kDash : causeRateHtml(cause, "after_bytes_per_step")) +
           "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string sizeOrDash(const ReadJson& capacity, const char* key) {
  std::optional<double> size = numberAt(capacity, key);
  return size ? countText(*size) : std::string(kDash);
}

}  // namespace

std::string diffSection(const ReadJson& diff) {
  const ReadJson& before = member(diff, "before");
  const ReadJson& after = member(diff, "after");
  double change = numberOr(diff, "peak_change", 0);
  std::string out = "<section id=\"diff\"><h2>What changed between two runs</h2>";
  out +=
      "<div class=\"tiles\">" +
      tile("before", bytesText(numberAt(before, "peak_bytes")),
           escapeHtml(textAt(before, "label"))) +
      tile("after", bytesText(numberAt(after, "peak_bytes")), escapeHtml(textAt(after, "label"))) +
      tile("change", signedBytesText(change), "noise " + bytesText(numberAt(diff, "noise_bytes"))) +
      "</div>";
  out += "<div class=\"card\"><p>The peak compared: " + escapeHtml(textAt(diff, "peak_measure")) +
         (flagAt(diff, "empty").value_or(false) ? ". <strong>No change beyond the noise.</strong>"
                                                : ".") +
         "</p>" + bothTimelinesChart(diff) +
         legend({{"before-line", escapeHtml(textAt(before, "label"))},
                 {"live", escapeHtml(textAt(after, "label"))}}) +
         "</div>";
  for (const ReadJson& breakdown : arrayAt(diff, "breakdowns")) out += breakdownCard(breakdown);
  out += causesCard(diff);
  const ReadJson& capacity = member(diff, "capacity");
  if (capacity.is_object()) {
    out += "<div class=\"card\"><h3>Largest size that fits</h3><div class=\"tiles small\">" +
           tile("before", sizeOrDash(capacity, "before_largest_size")) +
           tile("after", sizeOrDash(capacity, "after_largest_size")) + "</div></div>";
  }
  std::vector<std::string> warnings = stringsAt(diff, "warnings");
  if (!warnings.empty()) out += notesHtml(warnings);
  return out + "</section>";
}

}  // namespace memseal::report::html
