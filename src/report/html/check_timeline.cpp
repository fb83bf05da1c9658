// The check section's top: the verdict and the timeline of tracked bytes and resident memory per
// step (warm-up shaded, each finding's growth marked).
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

std::vector<StepSample> stepSamples(const ReadJson& check) {
  std::vector<StepSample> samples;
  const ReadJson& per_step = arrayAt(check, "per_step");
  for (std::size_t i = 0; i < per_step.size(); ++i) {
    const ReadJson& entry = per_step[i];
    if (!entry.is_object()) continue;
    StepSample sample;
    sample.step = clampForChart(numberOr(entry, "step", static_cast<double>(i)));
    sample.live = numberAt(entry, "live_bytes");
    sample.resident = numberAt(entry, "resident_bytes");
    sample.count = numberAt(entry, "live_count");
    sample.graph_nodes = numberAt(entry, "graph_nodes_alive");
    samples.push_back(sample);
  }
  if (samples.empty()) {
    // Files from before per_step have only the tracked bytes, one per step boundary.
    const ReadJson& live = arrayAt(check, "live_bytes");
    for (std::size_t i = 0; i < live.size(); ++i) {
      StepSample sample;
      sample.step = static_cast<double>(i);
      sample.live = numberOf(live[i]);
      samples.push_back(sample);
    }
  }
  std::stable_sort(samples.begin(), samples.end(),
                   [](const StepSample& a, const StepSample& b) { return a.step < b.step; });
  return samples;
}

bool isLeak(const ReadJson& check) {
  std::string verdict = textAt(check, "verdict");
  if (verdict == "leak") return true;
  if (verdict == "no_leak") return false;
  return !arrayAt(check, "findings").empty();
}

// Resident growth (graph nodes, untracked growth) is drawn against the resident axis; storage
// against the tracked bytes.
bool growsResident(const ReadJson& finding) {
  return textAt(finding, "retained") != "tensor storage";
}

std::string verdictHtml(const ReadJson& check, const std::vector<StepSample>& samples) {
  bool leak = isLeak(check);
  double steps = numberOr(check, "steps", samples.empty() ? 0 : samples.back().step + 1);
  double warmup = numberOr(check, "warmup", 0);
  double observed = std::max(0.0, steps - warmup);
  std::size_t findings = arrayAt(check, "findings").size();
  std::string out = std::string("<div class=\"verdict ") + (leak ? "leak" : "no_leak") +
                    "\" id=\"verdict\" data-verdict=\"" + (leak ? "leak" : "no_leak") + "\">";
  out += std::string("<div class=\"verdict-icon\" aria-hidden=\"true\">") +
         (leak ? "&#10007;" : "&#10003;") + "</div><div>";
  if (leak) {
    out += "<div class=\"verdict-title\">Leak: " + countText(findings) + " " +
           plural(findings, "finding", "findings") + "</div>";
  } else {
    out += "<div class=\"verdict-title\">No leak</div>";
  }
  out += "<div class=\"verdict-detail\">in " + countText(observed) + " " +
         plural(observed, "step", "steps") + " after " + countText(warmup) + " warm-up " +
         plural(warmup, "step", "steps");
  if (std::optional<double> detected = numberAt(check, "detected_at_step"); leak && detected) {
    out += " &middot; clear from step " + countText(*detected) + " on";
  }
  if (!samples.empty() && samples.back().live) {
    out += " &middot; " + bytesText(samples.back().live) + " tracked at the end";
  }
  if (std::optional<bool> backward = flagAt(check, "backward_ran")) {
    out += *backward ? " &middot; backward ran" : " &middot; backward never ran after warm-up";
  }
  return out + "</div></div></div>";
}

namespace {

// A finding's growth rate, drawn as a dashed line from the end of warm-up.
struct Growth {
  int index;
  bool resident_axis;
  double x0, y0, x1, y1;
  std::string title;
};

// The tracked bytes and resident memory of the samples that have them.
struct TimelineSeries {
  std::vector<Point> live, resident;
};

TimelineSeries timelineSeries(const std::vector<StepSample>& samples) {
  TimelineSeries series;
  for (const StepSample& sample : samples) {
    if (sample.live) series.live.emplace_back(sample.step, clampForChart(*sample.live));
    if (sample.resident && *sample.resident > 0) {
      series.resident.emplace_back(sample.step, clampForChart(*sample.resident));
    }
  }
  return series;
}

// Each finding that grows, from the first sample at or after `growth_start` on its axis.
std::vector<Growth> findingGrowths(const ReadJson& check, const TimelineSeries& series,
                                   double growth_start, double last_step) {
  std::vector<Growth> growths;
  const ReadJson& findings = arrayAt(check, "findings");
  for (std::size_t i = 0; i < findings.size(); ++i) {
    const ReadJson& finding = findings[i];
    double rate = clampForChart(numberOr(finding, "bytes_per_step", 0));
    if (!(rate > 0)) continue;
    bool resident_axis = growsResident(finding);
    const std::vector<Point>& points = resident_axis ? series.resident : series.live;
    auto base = std::find_if(points.begin(), points.end(),
                             [&](const Point& point) { return point.first >= growth_start; });
    if (base == points.end()) continue;
    int index = static_cast<int>(i) + 1;
    growths.push_back({index, resident_axis, base->first, base->second, last_step,
                       base->second + rate * (last_step - base->first),
                       "[" + std::to_string(index) + "] " +
                           escapeHtml(textAt(finding, "category")) + ": +" + bytesText(rate) +
                           " per step" + (resident_axis ? " (resident memory)" : "")});
  }
  return growths;
}

// A byte axis that fits the samples from `fit_from` on and the growth lines drawn against it
// (warm-up's climb is clipped at the edge: the chart shows whether memory keeps growing once the
// loop is steady).
ByteTicks timelineByteAxis(const std::vector<Point>& points, bool resident_axis,
                           const std::vector<Growth>& growths, double fit_from) {
  double lo = 1e300, hi = -1e300;
  for (const Point& point : points) {
    if (point.first < fit_from) continue;
    lo = std::min(lo, point.second);
    hi = std::max(hi, point.second);
  }
  if (lo > hi) lo = hi = points.front().second;
  for (const Growth& growth : growths) {
    if (growth.resident_axis != resident_axis) continue;
    lo = std::min(lo, growth.y0);
    hi = std::max(hi, growth.y1);
  }
  auto [range_lo, range_hi] = axisRange(lo, hi, std::max(4096.0, 0.02 * std::fabs(hi)));
  return byteTicks(range_lo, range_hi, 6);
}

// The numbered badge at the end of each growth line; badges ending at the same height move apart
// so that each index stays readable.
void drawGrowthBadges(std::string& svg, const std::vector<Growth>& growths, const Plot& plot,
                      const Scale& x, const Scale& live_y, const Scale& resident_y) {
  std::vector<double> label_ys;
  for (const Growth& growth : growths) {
    const Scale& y = growth.resident_axis ? resident_y : live_y;
    std::string colour = findingColour(growth.index);
    svg += "<g class=\"growth " + colour + "\" data-finding=\"" + std::to_string(growth.index) +
           "\"><title>" + growth.title + "</title>";
    double label_y = std::clamp(y(growth.y1), plot.top + 9, plot.bottom - 9);
    for (bool moved = true; moved;) {
      moved = false;
      for (double taken : label_ys) {
        if (std::fabs(taken - label_y) < 19) {
          label_y = taken + 19 <= plot.bottom - 9 ? taken + 19 : taken - 19;
          moved = true;
        }
      }
    }
    label_ys.push_back(label_y);
    double label_x = x(growth.x1) - 14;
    svg += "<circle cx=\"" + px(label_x) + "\" cy=\"" + px(label_y) +
           "\" r=\"9\" class=\"growth-badge\"/>";
    svg += svgText(label_x, label_y + 4, std::to_string(growth.index), "growth-index", "middle");
    svg += "</g>";
  }
}

// The step from which the leak was clear, when the report says so and it is on the chart.
void drawDetectedStep(std::string& svg, const ReadJson& check, const Plot& plot, const Scale& x,
                      double first_step, double last_step) {
  std::optional<double> detected = numberAt(check, "detected_at_step");
  if (!detected || !isLeak(check) || *detected < first_step || *detected > last_step) return;
  double at = x(*detected);
  svg += svgLine(at, plot.top - 4, at, plot.bottom, "detected");
  bool near_right = at > plot.right - 150;
  svg += svgText(near_right ? at - 6 : at + 6, plot.top + 2,
                 "leak clear from step " + countText(*detected), "detected-label",
                 near_right ? "end" : "start");
}

// Tooltips: the numbers of the last step of each stretch of samples.
std::string timelineHover(const Plot& plot, const Scale& x, const std::vector<StepSample>& samples,
                          double warmup) {
  std::vector<double> xs;
  for (const StepSample& sample : samples) xs.push_back(sample.step);
  return hoverColumns(plot, x, xs, 240, [&](std::size_t start, std::size_t end) {
    const StepSample& last = samples[end - 1];
    std::string text = end - start == 1 ? "step " + countText(last.step)
                                        : "steps " + countText(samples[start].step) + "&#8211;" +
                                              countText(last.step) + " (the last shown)";
    if (last.live) text += "&#10;tracked " + bytesText(*last.live);
    if (last.count) text += " in " + countText(*last.count) + " allocations";
    if (last.resident) text += "&#10;resident " + bytesText(*last.resident);
    if (last.graph_nodes && *last.graph_nodes > 0) {
      text += "&#10;graph nodes alive " + countText(*last.graph_nodes);
    }
    if (last.step < warmup) text += "&#10;warm-up";
    return text;
  });
}

}  // namespace

// Tracked bytes (left axis) and resident memory (right axis) per step, warm-up shaded, the step
// from which the leak was clear, and each finding's growth rate as a dashed line from the end of
// warm-up: where the measured line follows a dashed one, that finding is what grows.
std::string timelineChart(const ReadJson& check, const std::vector<StepSample>& samples) {
  constexpr int kWidth = 960;
  constexpr int kHeight = 360;
  const Plot plot{84, 30, kWidth - 86.0, kHeight - 48.0};
  std::string svg = svgOpen("timeline-chart", kWidth, kHeight,
                            "Tracked tensor bytes and resident memory per step");
  TimelineSeries series = timelineSeries(samples);
  if (series.live.empty() && series.resident.empty()) {
    return svg + svgEmpty(plot, "no per-step samples in this report") + "</svg>";
  }
  double first_step = samples.front().step;
  double last_step = std::max(samples.back().step, first_step + 1);
  double warmup = clampForChart(numberOr(check, "warmup", 0));
  double growth_start = std::clamp(warmup - 1, first_step, last_step);
  std::vector<Growth> growths = findingGrowths(check, series, growth_start, last_step);

  Scale x{first_step, last_step, plot.left, plot.right};
  std::size_t steady_samples = std::count_if(samples.begin(), samples.end(),
                                             [&](const auto& s) { return s.step >= growth_start; });
  double fit_from = steady_samples >= 2 ? growth_start : first_step;
  std::optional<ByteTicks> live_ticks, resident_ticks;
  Scale live_y, resident_y;
  if (!series.live.empty()) {
    live_ticks = timelineByteAxis(series.live, false, growths, fit_from);
    live_y = {live_ticks->ticks.lo, live_ticks->ticks.hi, plot.bottom, plot.top};
  }
  if (!series.resident.empty()) {
    resident_ticks = timelineByteAxis(series.resident, true, growths, fit_from);
    resident_y = {resident_ticks->ticks.lo, resident_ticks->ticks.hi, plot.bottom, plot.top};
  }

  if (warmup > first_step) {
    double right = x(std::min(warmup - 0.5, last_step));
    svg += svgRect(plot.left, plot.top, right - plot.left, plot.bottom - plot.top, "warmup");
    if (right - plot.left > 60) svg += svgText(plot.left + 6, plot.top + 14, "warm-up", "band");
  }
  drawXAxis(svg, plot, x, stepTicks(first_step, last_step), compactNumber, "step");
  // The left axis draws the grid; with no tracked bytes the resident axis moves to the left.
  if (live_ticks) {
    drawYAxis(
        svg, plot, live_y, live_ticks->ticks,
        [&](double value) { return byteTickLabel(value, *live_ticks); }, "tracked tensor bytes",
        false, "tick tick-live");
  }
  if (resident_ticks) {
    drawYAxis(
        svg, plot, resident_y, resident_ticks->ticks,
        [&](double value) { return byteTickLabel(value, *resident_ticks); }, "resident memory",
        live_ticks.has_value(), "tick tick-resident");
  }
  svg += clipToPlot(plot);
  if (!series.resident.empty()) {
    svg += polyline(thinToPeaks(series.resident, 1200), x, resident_y, "resident");
  }
  if (!series.live.empty()) {
    std::vector<Point> thinned = thinToPeaks(series.live, 1200);
    svg += area(thinned, x, live_y, "live-area");
    svg += polyline(thinned, x, live_y, "live");
  }
  for (const Growth& growth : growths) {
    const Scale& y = growth.resident_axis ? resident_y : live_y;
    svg += std::string("<g class=\"growth ") + findingColour(growth.index) + "\">" +
           svgLine(x(growth.x0), y(growth.y0), x(growth.x1), y(growth.y1), "growth-line") + "</g>";
  }
  svg += "</svg>";
  drawGrowthBadges(svg, growths, plot, x, live_y, resident_y);
  drawDetectedStep(svg, check, plot, x, first_step, last_step);
  svg += timelineHover(plot, x, samples, warmup);
  return svg + "</svg>";
}

// The legend names only what the chart drew.
std::string timelineCard(const ReadJson& check, const std::vector<StepSample>& samples) {
  auto any = [&](auto has) { return std::any_of(samples.begin(), samples.end(), has); };
  bool live = any([](const StepSample& sample) { return sample.live.has_value(); });
  bool resident = any([](const StepSample& sample) { return sample.resident.value_or(0) > 0; });
  std::vector<std::pair<const char*, std::string>> entries;
  if (live) entries.push_back({"live", "tracked tensor bytes (left axis)"});
  if (resident) {
    entries.push_back({"resident", std::string("resident memory of the process (") +
                                       (live ? "right" : "left") + " axis)"});
  }
  if (live || resident) {
    if (numberOr(check, "warmup", 0) > 0) entries.push_back({"warm", "warm-up: never blamed"});
    if (isLeak(check) && numberAt(check, "detected_at_step")) {
      entries.push_back({"dashed detected", "leak clear from this step on"});
    }
    const ReadJson& findings = arrayAt(check, "findings");
    if (std::any_of(findings.begin(), findings.end(), [](const ReadJson& finding) {
          return numberOr(finding, "bytes_per_step", 0) > 0;
        })) {
      entries.push_back(
          {"dashed growth", "a finding&#39;s growth per step, from the end of warm-up"});
    }
  }
  std::string out = "<div class=\"card\"><h3>Memory per step</h3>" + timelineChart(check, samples);
  if (!entries.empty()) out += legend(entries);
  return out + "</div>";
}

}  // namespace memseal::report::html
