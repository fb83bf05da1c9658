// The check's device memory (its optional "devices", CUDA devices today): allocated against
// reserved per device and step, with the diagnosis of each device.
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

// Allocated (filled, left colour) and reserved (line) bytes per step on one axis from zero: the gap
// between them is what the caching allocator holds beyond the tensors. `index` only makes the id.
std::string deviceChart(const ReadJson& device, std::size_t index, double warmup) {
  constexpr int kWidth = 960;
  constexpr int kHeight = 300;
  const Plot plot{84, 24, kWidth - 30.0, kHeight - 48.0};
  std::string id = "cuda-chart-" + std::to_string(index);
  std::string svg = svgOpen(id.c_str(), kWidth, kHeight, "CUDA allocated and reserved per step");
  std::vector<Point> allocated, reserved;
  for (const ReadJson& point : arrayAt(device, "per_step")) {
    std::optional<double> step = numberAt(point, "step");
    if (!step) continue;
    if (std::optional<double> bytes = numberAt(point, "allocated")) {
      allocated.emplace_back(clampForChart(*step), clampForChart(*bytes));
    }
    if (std::optional<double> bytes = numberAt(point, "reserved")) {
      reserved.emplace_back(clampForChart(*step), clampForChart(*bytes));
    }
  }
  auto byStep = [](const Point& a, const Point& b) { return a.first < b.first; };
  std::stable_sort(allocated.begin(), allocated.end(), byStep);
  std::stable_sort(reserved.begin(), reserved.end(), byStep);
  if (allocated.empty() && reserved.empty()) {
    return svg + svgEmpty(plot, "no step samples for this device") + "</svg>";
  }
  double first_step = 1e300, last_step = -1e300, highest = 0;
  for (const std::vector<Point>* series : {&allocated, &reserved}) {
    for (const Point& point : *series) {
      first_step = std::min(first_step, point.first);
      last_step = std::max(last_step, point.first);
      highest = std::max(highest, point.second);
    }
  }
  last_step = std::max(last_step, first_step + 1);
  Scale x{first_step, last_step, plot.left, plot.right};
  Ticks x_ticks = stepTicks(first_step, last_step);
  // From zero: reserved against allocated is a proportion, and must read as one.
  ByteTicks y_ticks = byteTicks(0, std::max(highest, 4096.0), 6);
  Scale y{y_ticks.ticks.lo, y_ticks.ticks.hi, plot.bottom, plot.top};
  if (warmup > first_step) {
    double right = x(std::min(warmup - 0.5, last_step));
    svg += svgRect(plot.left, plot.top, right - plot.left, plot.bottom - plot.top, "warmup");
    if (right - plot.left > 60) svg += svgText(plot.left + 6, plot.top + 14, "warm-up", "band");
  }
  drawXAxis(svg, plot, x, x_ticks, compactNumber, "step");
  drawYAxis(
      svg, plot, y, y_ticks.ticks, [&](double value) { return byteTickLabel(value, y_ticks); },
      "bytes", false, "tick");
  svg += clipToPlot(plot);
  if (!allocated.empty()) {
    std::vector<Point> thinned = thinToPeaks(allocated, 1200);
    svg += area(thinned, x, y, "live-area");
    svg += polyline(thinned, x, y, "live");
  }
  if (!reserved.empty()) svg += polyline(thinToPeaks(reserved, 1200), x, y, "resident");
  svg += "</svg>";
  // Tooltips from the reserved series' steps (the allocated ones are the same steps).
  const std::vector<Point>& steps = reserved.empty() ? allocated : reserved;
  std::vector<double> xs;
  for (const Point& point : steps) xs.push_back(point.first);
  svg += hoverColumns(plot, x, xs, 240, [&](std::size_t, std::size_t end) {
    double step = steps[end - 1].first;
    std::string text = "step " + countText(step);
    auto at = [&](const std::vector<Point>& series) -> std::optional<double> {
      auto found = std::find_if(series.begin(), series.end(),
                                [&](const Point& point) { return point.first == step; });
      if (found == series.end()) return std::nullopt;
      return found->second;
    };
    if (std::optional<double> bytes = at(allocated)) text += "&#10;allocated " + bytesText(*bytes);
    if (std::optional<double> bytes = at(reserved)) text += "&#10;reserved " + bytesText(*bytes);
    return text;
  });
  return svg + "</svg>";
}

// The verdict name picks one of these words; anything else is shown escaped, in no class.
const char* deviceVerdictClass(const std::string& verdict) {
  if (verdict == "leak") return "leak";
  if (verdict == "steady") return "no_leak";
  return "";
}

std::string deviceCard(const ReadJson& device, std::size_t index, double warmup) {
  std::string name = textAt(device, "device");
  std::string verdict = textAt(device, "verdict");
  std::string out = "<article class=\"device-card card\" id=\"cuda-device-" +
                    std::to_string(index) + "\"><header><h3>" +
                    (name.empty() ? muted("device") : escapeHtml(name)) + "</h3>";
  if (!verdict.empty()) {
    out += std::string("<span class=\"pill ") + deviceVerdictClass(verdict) + "\">" +
           escapeHtml(verdict) + (verdict == "leak" ? "" : ", not a leak") + "</span>";
  }
  out += "</header><div class=\"tiles small\">";
  out += tile("allocated", bytesText(numberAt(device, "allocated")),
              "peak " + bytesText(numberAt(device, "peak_allocated")));
  out += tile("reserved", bytesText(numberAt(device, "reserved")),
              "peak " + bytesText(numberAt(device, "peak_reserved")));
  out += tile("free inside used segments", bytesText(numberAt(device, "inactive_split_bytes")),
              "empty_cache() cannot return it");
  out += tile("largest free extent", bytesText(numberAt(device, "largest_free_extent")),
              "the largest request the cache serves as is");
  out += "</div>" + deviceChart(device, index, warmup);
  out +=
      legend({{"live", "allocated to tensors"}, {"resident", "reserved by the caching allocator"}});
  return out + hintHtml("What it means", textAt(device, "hint")) + "</article>";
}

}  // namespace

// Absent when the report has no devices (no CUDA events were seen).
std::string deviceMemoryHtml(const ReadJson& check) {
  const ReadJson& devices = arrayAt(check, "devices");
  if (devices.empty()) return "";
  double warmup = clampForChart(numberOr(check, "warmup", 0));
  std::string out =
      "<div class=\"cuda-memory\" id=\"cuda-memory\"><h3>CUDA memory</h3><p class=\"muted\">"
      "As PyTorch&#39;s caching allocator reported it: allocated is what tensors hold, reserved "
      "what the allocator keeps from the driver.</p>";
  std::size_t index = 0;
  for (const ReadJson& device : devices) {
    out += deviceCard(device.is_object() ? device : nullJson(), index++, warmup);
  }
  return out + "</div>";
}

}  // namespace memseal::report::html
