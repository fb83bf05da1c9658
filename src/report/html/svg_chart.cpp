#include "report/html/svg_chart.h"

#include <cmath>
#include <cstdio>

#include "report/html/html_text.h"

namespace memseal::report::html {

// About `target` ticks at 1, 2 or 5 times a power of ten, the range widened to whole ticks.
Ticks ticksWithin(double first, double last, int target) {
  Ticks ticks = niceTicks(first, last, target);
  ticks.values.erase(std::remove_if(ticks.values.begin(), ticks.values.end(),
                                    [&](double value) { return value < first || value > last; }),
                     ticks.values.end());
  return ticks;
}

std::vector<Point> pointsOf(const ReadJson& list, const char* x_key, const char* y_key) {
  std::vector<Point> points;
  if (!list.is_array()) return points;
  for (const ReadJson& entry : list) {
    std::optional<double> x = numberAt(entry, x_key);
    std::optional<double> y = numberAt(entry, y_key);
    if (x && y) points.emplace_back(clampForChart(*x), clampForChart(*y));
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const Point& a, const Point& b) { return a.first < b.first; });
  return points;
}

Ticks niceTicks(double lo, double hi, int target) {
  lo = clampForChart(lo);
  hi = clampForChart(hi);
  if (!(hi > lo)) hi = lo + 1;
  double raw = (hi - lo) / std::max(target, 1);
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double residual = raw / magnitude;
  double step = (residual <= 1 ? 1 : residual <= 2 ? 2 : residual <= 5 ? 5 : 10) * magnitude;
  Ticks ticks;
  ticks.lo = std::floor(lo / step + 1e-9) * step;
  ticks.hi = std::ceil(hi / step - 1e-9) * step;
  for (int i = 0; i <= 2 * target + 2; ++i) {
    double value = ticks.lo + i * step;
    if (value > ticks.hi + step * 1e-6) break;
    ticks.values.push_back(std::fabs(value) < step * 1e-6 ? 0.0 : value);
  }
  return ticks;
}

// Ticks on a step axis: whole steps inside [first_step, last_step] only.
Ticks stepTicks(double first_step, double last_step) {
  Ticks ticks = niceTicks(first_step, last_step, 10);
  ticks.values.erase(std::remove_if(ticks.values.begin(), ticks.values.end(),
                                    [&](double value) {
                                      return value < first_step || value > last_step ||
                                             value != std::floor(value);
                                    }),
                     ticks.values.end());
  return ticks;
}

// Byte axes tick at round numbers of one binary unit (0, 50, 100, 150 MiB), so that every label
// has the same unit and reads at a glance.

ByteTicks byteTicks(double lo, double hi, int target) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double largest = std::max(std::fabs(clampForChart(lo)), std::fabs(clampForChart(hi)));
  ByteTicks result;
  int unit = 0;
  while (largest / result.unit >= 1024 && unit < 6) {
    result.unit *= 1024;
    ++unit;
  }
  result.unit_name = kUnits[unit];
  result.ticks = niceTicks(lo / result.unit, hi / result.unit, target);
  result.ticks.lo *= result.unit;
  result.ticks.hi *= result.unit;
  for (double& value : result.ticks.values) value *= result.unit;
  return result;
}

std::string byteTickLabel(double value, const ByteTicks& ticks) {
  char text[48];
  std::snprintf(text, sizeof(text), "%g %s", value / ticks.unit, value == 0 ? "" : ticks.unit_name);
  return text;
}

// Sizes and steps on an axis: "250", "1.5k", "2M".
std::string compactNumber(double value) {
  char text[48];
  double magnitude = std::fabs(value);
  if (magnitude >= 1e9) {
    std::snprintf(text, sizeof(text), "%gG", value / 1e9);
  } else if (magnitude >= 1e6) {
    std::snprintf(text, sizeof(text), "%gM", value / 1e6);
  } else if (magnitude >= 1e4) {
    std::snprintf(text, sizeof(text), "%gk", value / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%g", value);
  }
  return text;
}

// The range an axis shows for data in [lo, hi]: from zero when the data comes near it, so that
// proportions read true; around the data when it sits far above zero (4 KiB per step on a 200 MiB
// process is a flat line on an axis from zero). At least `min_span` wide, so noise stays noise.
std::pair<double, double> axisRange(double lo, double hi, double min_span) {
  lo = clampForChart(lo);
  hi = clampForChart(hi);
  if (lo >= 0 && hi - lo > 0.25 * hi) lo = 0;
  if (hi <= 0 && hi - lo > 0.25 * -lo) hi = 0;
  if (hi - lo < min_span) {
    double middle = (hi + lo) / 2;
    lo = middle - min_span / 2;
    hi = middle + min_span / 2;
    if (lo < 0 && middle >= 0) {
      hi -= lo;
      lo = 0;
    }
  }
  return {lo, hi};
}

std::string px(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

std::string svgOpen(const char* id, int width, int height, const char* label) {
  return std::string("<svg class=\"chart\" id=\"") + id + "\" viewBox=\"0 0 " +
         std::to_string(width) + " " + std::to_string(height) + "\" role=\"img\" aria-label=\"" +
         label + "\"><title>" + label + "</title>";
}

std::string svgText(double x, double y, const std::string& html, const char* css_class,
                    const char* anchor) {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" class=\"" + css_class +
         "\" text-anchor=\"" + anchor + "\">" + html + "</text>";
}

std::string svgLine(double x1, double y1, double x2, double y2, const char* css_class) {
  return "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" + px(y2) +
         "\" class=\"" + css_class + "\"/>";
}

std::string svgRect(double x, double y, double width, double height, const char* css_class,
                    const std::string& title_html) {
  std::string out = "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" +
                    px(std::max(width, 0.0)) + "\" height=\"" + px(std::max(height, 0.0)) +
                    "\" class=\"" + css_class + "\"";
  if (title_html.empty()) return out + "/>";
  return out + "><title>" + title_html + "</title></rect>";
}

std::string svgEmpty(const Plot& plot, const char* message) {
  return svgText((plot.left + plot.right) / 2, (plot.top + plot.bottom) / 2, message, "empty",
                 "middle");
}

// A nested viewport with the plot's own coordinates: what is drawn inside is cut at the axes
// (a nested <svg> clips by default, without a clipPath id that two charts on a page could share).
std::string clipToPlot(const Plot& plot) {
  std::string width = px(plot.right - plot.left);
  std::string height = px(plot.bottom - plot.top);
  return "<svg x=\"" + px(plot.left) + "\" y=\"" + px(plot.top) + "\" width=\"" + width +
         "\" height=\"" + height + "\" viewBox=\"" + px(plot.left) + " " + px(plot.top) + " " +
         width + " " + height + "\">";
}

// At most `limit` points, each the highest of its stretch, so that peaks survive thinning.
std::vector<Point> thinToPeaks(const std::vector<Point>& points, std::size_t limit) {
  if (points.size() <= limit) return points;
  std::vector<Point> thinned;
  std::size_t stretch = (points.size() + limit - 1) / limit;
  for (std::size_t start = 0; start < points.size(); start += stretch) {
    std::size_t end = std::min(points.size(), start + stretch);
    thinned.push_back(
        *std::max_element(points.begin() + start, points.begin() + end,
                          [](const Point& a, const Point& b) { return a.second < b.second; }));
  }
  return thinned;
}

std::string polyline(const std::vector<Point>& points, const Scale& x, const Scale& y,
                     const char* css_class) {
  std::string out = "<polyline class=\"" + std::string(css_class) + "\" points=\"";
  for (const Point& point : points) out += px(x(point.first)) + "," + px(y(point.second)) + " ";
  return out + "\"/>";
}

// The same line closed down to the x axis, for a filled area under it.
std::string area(const std::vector<Point>& points, const Scale& x, const Scale& y,
                 const char* css_class) {
  if (points.empty()) return "";
  double base = y(std::max(y.lo, 0.0));
  std::string out = "<path class=\"" + std::string(css_class) + "\" d=\"M" +
                    px(x(points.front().first)) + "," + px(base);
  for (const Point& point : points) out += " L" + px(x(point.first)) + "," + px(y(point.second));
  return out + " L" + px(x(points.back().first)) + "," + px(base) + " Z\"/>";
}

void drawXAxis(std::string& svg, const Plot& plot, const Scale& x, const Ticks& ticks,
               const Labeler& label, const char* title) {
  svg += "<g class=\"axis\">";
  for (double value : ticks.values) {
    double at = x(value);
    svg += svgLine(at, plot.top, at, plot.bottom, "grid");
    svg += svgText(at, plot.bottom + 18, label(value), "tick", "middle");
  }
  svg += svgLine(plot.left, plot.bottom, plot.right, plot.bottom, "baseline");
  svg += svgText((plot.left + plot.right) / 2, plot.bottom + 38, title, "axis-title", "middle");
  svg += "</g>";
}

void drawYAxis(std::string& svg, const Plot& plot, const Scale& y, const Ticks& ticks,
               const Labeler& label, const char* title, bool right_side, const char* tick_class) {
  svg += "<g class=\"axis\">";
  double edge = right_side ? plot.right : plot.left;
  for (double value : ticks.values) {
    double at = y(value);
    if (!right_side) svg += svgLine(plot.left, at, plot.right, at, "grid");
    svg += svgText(right_side ? edge + 8 : edge - 8, at + 4, label(value), tick_class,
                   right_side ? "start" : "end");
  }
  // Rotated axis titles sit in the margin, reading upwards on the left and downwards on the right.
  double title_x = right_side ? edge + 70 : edge - 64;
  double title_y = (plot.top + plot.bottom) / 2;
  svg += "<text class=\"axis-title " + std::string(tick_class) + "\" text-anchor=\"middle\" " +
         "transform=\"translate(" + px(title_x) + "," + px(title_y) + ") rotate(" +
         (right_side ? "90" : "-90") + ")\">" + title + "</text>";
  svg += "</g>";
}

std::string legend(const std::vector<std::pair<const char*, std::string>>& entries) {
  std::string out = "<div class=\"legend\">";
  for (const auto& [swatch, label_html] : entries) {
    out += std::string("<span><i class=\"swatch ") + swatch + "\"></i>" + label_html + "</span>";
  }
  return out + "</div>";
}

const char* roleClass(const std::string& role) {
  static const char* const kClasses[] = {"role-parameters",  "role-gradients",   "role-optimizer",
                                         "role-activations", "role-temporaries", "role-other"};
  for (int i = 0; i < 6; ++i) {
    if (role == kRoles[i]) return kClasses[i];
  }
  return "role-unknown";
}

const char* findingColour(int index) {
  static const char* const kClasses[] = {"f1", "f2", "f3", "f4", "f5", "f6"};
  return kClasses[(index - 1) % 6];
}

}  // namespace memseal::report::html
