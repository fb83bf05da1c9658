// The explain section (memseal.explain/1): the peak by role, module, site and tensor, and the live
// bytes over the peak step.
#include "report/html/sections.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "report/html/html_text.h"
#include "report/html/svg_chart.h"
#include "report/html_report.h"

namespace memseal::report::html {

namespace {

std::string rolesChart(const ReadJson& roles) {
  constexpr int kWidth = 960;
  constexpr double kRowTop = 70, kRowHeight = 30;
  struct Role {
    std::string name;
    double bytes, count;
  };
  std::vector<Role> rows;
  double total = 0, largest = 0;
  for (const ReadJson& role : roles) {
    if (!role.is_object()) continue;
    double bytes = std::max(0.0, clampForChart(numberOr(role, "bytes", 0)));
    rows.push_back({textAt(role, "role"), bytes, numberOr(role, "count", 0)});
    total += bytes;
    largest = std::max(largest, bytes);
  }
  int height = static_cast<int>(kRowTop + kRowHeight * rows.size() + 8);
  std::string svg = svgOpen("roles-chart", kWidth, std::max(height, 90), "Peak memory by role");
  if (rows.empty() || !(total > 0)) {
    return svg + svgEmpty({0, 0, kWidth, 90}, "no bytes by role in this report") + "</svg>";
  }
  // One stacked bar for the whole peak, then one row per role that doubles as the legend.
  double x = 0;
  for (const Role& role : rows) {
    double width = kWidth * role.bytes / total;
    std::string title = escapeHtml(role.name) + ": " + bytesText(role.bytes) + " (" +
                        percentText(role.bytes, total) + ")";
    svg += std::string("<g class=\"") + roleClass(role.name) + "\">" +
           svgRect(x, 8, width, 40, "segment", title);
    if (width > 90) svg += svgText(x + 8, 33, escapeHtml(role.name), "segment-label");
    svg += "</g>";
    x += width;
  }
  constexpr double kBarLeft = 190, kBarWidth = 470;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Role& role = rows[i];
    double top = kRowTop + kRowHeight * i;
    svg += std::string("<g class=\"") + roleClass(role.name) + "\">";
    svg += svgRect(0, top + 6, 14, 14, "segment");
    svg += svgText(22, top + 18, escapeHtml(role.name), "role-name");
    svg += svgRect(kBarLeft, top + 5, std::max(1.0, kBarWidth * role.bytes / largest), 16,
                   "segment bar",
                   escapeHtml(role.name) + ": " + bytesText(role.bytes) + " in " +
                       countText(role.count) + " " + plural(role.count, "tensor", "tensors"));
    svg += svgText(kBarLeft + kBarWidth + 14, top + 18,
                   "<tspan class=\"role-bytes\">" + bytesText(role.bytes) + "</tspan>  " +
                       percentText(role.bytes, total) + "  &#183;  " + countText(role.count) + " " +
                       plural(role.count, "tensor", "tensors"),
                   "role-value");
    svg += "</g>";
  }
  return svg + "</svg>";
}

// Live bytes over the peak step: the step's baseline, the climb to the peak, and what is left.
std::string peakTimelineChart(const ReadJson& explain) {
  constexpr int kWidth = 960;
  constexpr int kHeight = 300;
  const Plot plot{84, 24, kWidth - 24.0, kHeight - 48.0};
  std::string svg =
      svgOpen("peak-timeline-chart", kWidth, kHeight, "Live tracked bytes over the peak step");
  std::vector<Point> points = pointsOf(arrayAt(explain, "timeline"), "event", "live_bytes");
  if (points.empty()) return svg + svgEmpty(plot, "no timeline in this report") + "</svg>";

  std::optional<double> peak = numberAt(explain, "peak_bytes");
  std::optional<double> peak_event = numberAt(explain, "peak_event");
  std::optional<double> baseline = numberAt(explain, "baseline_bytes");
  double first = points.front().first;
  double last = std::max(points.back().first, first + 1);
  double hi = 0;
  for (const Point& point : points) hi = std::max(hi, point.second);
  if (peak) hi = std::max(hi, clampForChart(*peak));
  ByteTicks y_ticks = byteTicks(0, std::max(hi, 1024.0), 5);
  Scale x{first, last, plot.left, plot.right};
  Scale y{y_ticks.ticks.lo, y_ticks.ticks.hi, plot.bottom, plot.top};
  Ticks x_ticks = ticksWithin(first, last, 10);
  drawXAxis(svg, plot, x, x_ticks, compactNumber, "allocation or free in the peak step");
  drawYAxis(
      svg, plot, y, y_ticks.ticks, [&](double value) { return byteTickLabel(value, y_ticks); },
      "live tracked bytes", false, "tick");
  svg += area(points, x, y, "live-area");
  svg += polyline(points, x, y, "live");
  if (baseline) {
    double at = y(*baseline);
    svg += svgLine(plot.left, at, plot.right, at, "reference");
    // Below the line at the left: the step starts there, and what it allocates rises above it.
    svg += svgText(plot.left + 6, at + 16, "baseline " + bytesText(*baseline), "reference-label");
  }
  if (peak && peak_event && *peak_event >= first && *peak_event <= last) {
    double cx = x(*peak_event);
    double cy = y(*peak);
    bool near_right = cx > plot.right - 160;
    svg += "<g class=\"peak\"><title>peak " + bytesText(*peak) + " after event " +
           countText(*peak_event) + "</title><circle cx=\"" + px(cx) + "\" cy=\"" + px(cy) +
           "\" r=\"5\"/>" +
           svgText(near_right ? cx - 10 : cx + 10, std::max(cy, plot.top + 12),
                   "peak " + bytesText(*peak), "peak-label", near_right ? "end" : "start") +
           "</g>";
  }
  std::vector<double> xs;
  for (const Point& point : points) xs.push_back(point.first);
  svg += hoverColumns(plot, x, xs, 256, [&](std::size_t start, std::size_t end) {
    double highest = 0;
    for (std::size_t i = start; i < end; ++i) highest = std::max(highest, points[i].second);
    return "event " + countText(points[start].first) +
           (end - start > 1 ? "&#8211;" + countText(points[end - 1].first) : "") + "&#10;live " +
           bytesText(highest);
  });
  return svg + "</svg>";
}

// A role breakdown as a small inline bar, for table rows.
std::string roleMiniBar(const ReadJson& roles, double total) {
  if (!roles.is_object() || !(total > 0)) return "";
  constexpr double kWidth = 140;
  std::string out =
      "<svg class=\"mini\" viewBox=\"0 0 140 12\" width=\"140\" height=\"12\" "
      "aria-hidden=\"true\">";
  // The roles in their usual order (as in the role chart), then any this page does not know.
  std::vector<std::string> names(std::begin(kRoles), std::end(kRoles));
  for (auto it = roles.begin(); it != roles.end(); ++it) {
    if (std::find(names.begin(), names.end(), it.key()) == names.end()) names.push_back(it.key());
  }
  double x = 0;
  for (const std::string& name : names) {
    std::optional<double> bytes = numberAt(roles, name.c_str());
    if (!bytes || !(*bytes > 0)) continue;
    double width = kWidth * clampForChart(*bytes) / total;
    out += std::string("<g class=\"") + roleClass(name) + "\">" +
           svgRect(x, 0, width, 12, "segment", escapeHtml(name) + ": " + bytesText(*bytes)) +
           "</g>";
    x += width;
  }
  return out + "</svg>";
}

std::string modulesTable(const ReadJson& explain, double peak) {
  const ReadJson& modules = arrayAt(explain, "modules");
  if (modules.empty()) return "";
  std::string out =
      "<div class=\"card\"><h3>By module</h3><div class=\"table-wrap\"><table "
      "class=\"modules\"><thead><tr><th>module</th><th class=\"num\">bytes</th>"
      "<th class=\"num\">of peak</th><th class=\"num\">tensors</th><th>roles</th></tr></thead>"
      "<tbody>";
  for (const ReadJson& module : modules) {
    if (!module.is_object()) continue;
    std::string name = textAt(module, "module");
    double bytes = numberOr(module, "bytes", 0);
    out += "<tr>" + cell(name.empty() ? muted("(no module)") : codeText(name)) +
           numCell(bytesText(bytes)) + numCell(percentText(bytes, peak)) +
           numCell(countText(numberAt(module, "count"))) +
           cell(roleMiniBar(member(module, "roles"), bytes)) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string roleCell(const ReadJson& object) {
  std::string role = textAt(object, "role");
  if (role.empty()) return cell(muted(kDash));
  return "<td class=\"role\"><span class=\"role-dot " + std::string(roleClass(role)) +
         "\"></span>" + escapeHtml(role) + "</td>";
}

std::string sitesTable(const ReadJson& explain, double peak) {
  const ReadJson& sites = arrayAt(explain, "sites");
  if (sites.empty()) return "";
  std::string out =
      "<div class=\"card\"><h3>By allocation site</h3><div class=\"table-wrap\"><table "
      "class=\"sites\"><thead><tr><th>made by</th><th>scope</th><th>role</th>"
      "<th class=\"num\">bytes</th><th class=\"num\">of peak</th><th class=\"num\">tensors</th>"
      "<th>example</th></tr></thead><tbody>";
  for (const ReadJson& site : sites) {
    if (!site.is_object()) continue;
    double bytes = numberOr(site, "bytes", 0);
    const ReadJson& frames = member(site, "frames");
    std::string made_by = opHtml(site);
    if (frames.is_array() && !frames.empty()) {
      made_by += "<details><summary>" + firstUserFrameHtml(site) + "</summary>" +
                 stackHtml(frames) + "</details>";
    }
    out += "<tr>" + cell(made_by) + cell(scopeHtml(site)) + roleCell(site) +
           numCell(bytesText(bytes)) + numCell(percentText(bytes, peak)) +
           numCell(countText(numberAt(site, "count"))) + cell(tensorHtml(member(site, "tensor"))) +
           "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string tensorsTable(const ReadJson& explain) {
  const ReadJson& tensors = arrayAt(explain, "tensors");
  if (tensors.empty()) return "";
  std::string out =
      "<div class=\"card\"><h3>Largest tensors at the peak</h3><div class=\"table-wrap\"><table "
      "class=\"tensors\"><thead><tr><th class=\"num\">bytes</th><th>role</th><th>made by</th>"
      "<th>scope</th><th class=\"num\">step</th><th>tensor</th></tr></thead><tbody>";
  for (const ReadJson& tensor : tensors) {
    if (!tensor.is_object()) continue;
    out += "<tr>" + numCell(bytesText(numberAt(tensor, "bytes"))) + roleCell(tensor) +
           cell(opHtml(tensor)) + cell(scopeHtml(tensor)) +
           numCell(countText(numberAt(tensor, "step"))) +
           cell(tensorHtml(member(tensor, "tensor"))) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string stepPeaksTable(const ReadJson& explain) {
  const ReadJson& steps = arrayAt(explain, "step_peaks");
  if (steps.empty()) return "";
  std::optional<double> peak_step = numberAt(explain, "peak_step");
  std::string out =
      "<div class=\"card\"><h3>Peak of each measured step</h3><div class=\"table-wrap\"><table "
      "class=\"step-peaks compact\"><thead><tr><th class=\"num\">step</th><th class=\"num\">peak"
      "</th><th class=\"num\">baseline</th><th class=\"num\">end</th><th class=\"num\">growth in "
      "step</th></tr></thead><tbody>";
  for (const ReadJson& step : steps) {
    if (!step.is_object()) continue;
    std::optional<double> number = numberAt(step, "step");
    std::optional<double> peak = numberAt(step, "peak_bytes");
    std::optional<double> baseline = numberAt(step, "baseline_bytes");
    bool highlighted = number && peak_step && *number == *peak_step;
    out += highlighted ? "<tr class=\"highlight\">" : "<tr>";
    out += numCell(countText(number) + (highlighted ? " &#9650;" : "")) + numCell(bytesText(peak)) +
           numCell(bytesText(baseline)) + numCell(bytesText(numberAt(step, "end_bytes"))) +
           numCell(peak && baseline ? "+" + bytesText(*peak - *baseline) : kDash) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

}  // namespace

// What would lower this peak, most bytes first: the change, the bytes it removes, its cost.
std::string remediesTable(const ReadJson& explain, double peak_total) {
  std::string rows;
  for (const ReadJson& remedy : arrayAt(explain, "remedies")) {
    std::optional<double> bytes = numberAt(remedy, "bytes");
    bool upper_bound = flagAt(remedy, "upper_bound").value_or(false);
    std::string target = textAt(remedy, "target");
    rows += "<tr><td><strong>" + escapeHtml(textAt(remedy, "kind")) + "</strong>" +
            (target.empty() ? "" : " <code>" + escapeHtml(target) + "</code>") + "<br>" +
            richText(textAt(remedy, "change")) + "</td>" +
            numCell((upper_bound ? "up to " : "") + bytesText(bytes)) +
            numCell(bytes && peak_total > 0 ? ratioPercentText(*bytes / peak_total) : kDash) +
            "<td>" + richText(textAt(remedy, "cost")) + "</td></tr>";
  }
  if (rows.empty()) return "";
  return "<div class=\"card\"><h3>What would lower this peak</h3><div class=\"table-wrap\">"
         "<table class=\"remedies\"><thead><tr><th>change</th><th class=\"num\">removes</th>"
         "<th class=\"num\">of the peak</th><th>cost</th></tr></thead><tbody>" +
         rows + "</tbody></table></div></div>";
}

// Each CUDA device at its own peak: what tensors held beside what the caching allocator reserved,
// then the roles and sites of the blocks.
std::string deviceCards(const ReadJson& explain) {
  std::string out;
  for (const ReadJson& device : arrayAt(explain, "devices")) {
    if (!device.is_object()) continue;
    std::optional<double> allocated = numberAt(device, "allocated_bytes");
    out += "<div class=\"card\"><h3>" + escapeHtml(textAt(device, "device")) + " at its peak";
    if (std::optional<double> step = numberAt(device, "step"))
      out += " (step " + countText(*step) + ")";
    out += "</h3><div class=\"tiles\">";
    out += tile("allocated", bytesText(allocated), "held by tensors");
    out += tile("reserved", bytesText(numberAt(device, "reserved_bytes")),
                "by the caching allocator; at most " +
                    bytesText(numberAt(device, "reserved_peak_bytes")) + " in the step");
    out += tile("cached", bytesText(numberAt(device, "cached_free_bytes")),
                "reserved, held by no tensor");
    std::optional<double> waiting = numberAt(device, "pending_free_bytes");
    if (waiting && *waiting > 0) {
      out += tile("waiting", bytesText(waiting), "freed, still in use by a stream");
    }
    out += "</div>" + rolesChart(arrayAt(device, "roles"));
    // The device's modules, in the host's table (its "of peak" is of the allocated bytes).
    out += modulesTable(device, allocated.value_or(0));
    std::string rows;
    for (const ReadJson& site : arrayAt(device, "sites")) {
      if (!site.is_object()) continue;
      double bytes = numberOr(site, "bytes", 0);
      rows += "<tr>" + cell(codeText(textAt(site, "op"))) + cell(scopeHtml(site)) + roleCell(site) +
              numCell(bytesText(bytes)) + numCell(percentText(bytes, allocated.value_or(0))) +
              numCell(countText(numberAt(site, "count"))) + "</tr>";
    }
    if (!rows.empty()) {
      out +=
          "<div class=\"table-wrap\"><table class=\"sites\"><thead><tr><th>made by</th>"
          "<th>scope</th><th>role</th><th class=\"num\">bytes</th><th class=\"num\">of "
          "allocated</th><th class=\"num\">blocks</th></tr></thead><tbody>" +
          rows + "</tbody></table></div>";
    }
    out += "</div>";
  }
  return out;
}

std::string explainSection(const ReadJson& explain) {
  std::optional<double> peak = numberAt(explain, "peak_bytes");
  std::optional<double> baseline = numberAt(explain, "baseline_bytes");
  std::string out = "<section id=\"explain\"><h2>What the peak holds</h2>";
  out += "<div class=\"tiles\">";
  std::string where;
  if (std::optional<double> step = numberAt(explain, "peak_step")) {
    where = "at step " + countText(*step);
  }
  if (std::optional<double> event = numberAt(explain, "peak_event")) {
    where += (where.empty() ? "" : ", ") + std::string("after event ") + countText(*event);
  }
  out += tile("peak", bytesText(peak), where);
  out += tile("baseline", bytesText(baseline), "live when the step began");
  out += tile("end", bytesText(numberAt(explain, "end_bytes")), "live when it ended");
  out += tile("made in the step", peak && baseline ? "+" + bytesText(*peak - *baseline) : kDash,
              "peak above the baseline");
  out +=
      tile("live at the peak", countText(numberAt(explain, "peak_live_count")),
           countText(numberAt(explain, "events_in_step")) + " allocations and frees in the step");
  out += "</div>";
  const ReadJson& identified = member(explain, "identified");
  if (identified.is_object()) {
    auto yes = [&](const char* key) {
      return flagAt(identified, key).value_or(false) ? "told by identity" : "not given";
    };
    out += "<p class=\"muted small\">Parameters and gradients: " + std::string(yes("model")) +
           " &middot; optimizer state: " + yes("optimizer") + "</p>";
  }
  out += "<div class=\"card\"><h3>By role</h3>" + rolesChart(arrayAt(explain, "roles")) + "</div>";
  out += "<div class=\"card\"><h3>Live bytes over the peak step</h3>" + peakTimelineChart(explain) +
         legend({{"live", "live tracked bytes (the highest of each stretch of events)"},
                 {"dashed reference", "baseline: live when the step began"},
                 {"peak", "the peak"}}) +
         "</div>";
  double peak_total = peak.value_or(0);
  out += remediesTable(explain, peak_total);
  out += modulesTable(explain, peak_total);
  out += sitesTable(explain, peak_total);
  out += tensorsTable(explain);
  out += stepPeaksTable(explain);
  out += deviceCards(explain);
  out += notesHtml(stringsAt(explain, "notes"));
  return out + "</section>";
}

}  // namespace memseal::report::html
