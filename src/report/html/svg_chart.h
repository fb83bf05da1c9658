// The report's chart kit: inline SVG (axes with round ticks, lines, areas, hover columns with
// tooltips, legends), drawn from numbers only; text passed in is HTML already.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "report/html/json_reader.h"

namespace memseal::report::html {

// A linear map from data values to SVG pixels.
struct Scale {
  double lo = 0, hi = 1;    // data
  double from = 0, to = 1;  // pixels
  double operator()(double value) const {
    double fraction = hi > lo ? (clampForChart(value) - lo) / (hi - lo) : 0.5;
    return from + fraction * (to - from);
  }
};

// The rectangle inside the axes.
struct Plot {
  double left, top, right, bottom;
};

struct Ticks {
  double lo = 0, hi = 1;  // the axis range, widened to whole ticks
  std::vector<double> values;
};

struct ByteTicks {
  Ticks ticks;
  double unit = 1;
  const char* unit_name = "B";
};

using Point = std::pair<double, double>;

using Labeler = std::function<std::string(double)>;

// The roles of memseal.explain/1 in their order; colours by role are fixed here, and a role name
// from a document only picks one of these classes.
const char* const kRoles[] = {"parameters",  "gradients",   "optimizer_state",
                              "activations", "temporaries", "other"};

Ticks niceTicks(double lo, double hi, int target);
// niceTicks without the ticks outside [first, last]: an axis that starts and ends at the data.
Ticks ticksWithin(double first, double last, int target);
// The points of a document's list (each an object with `x_key` and `y_key`), ordered by x; entries
// without both numbers are left out.
std::vector<Point> pointsOf(const ReadJson& list, const char* x_key, const char* y_key);
Ticks stepTicks(double first_step, double last_step);
ByteTicks byteTicks(double lo, double hi, int target);
std::string byteTickLabel(double value, const ByteTicks& ticks);
std::string compactNumber(double value);
std::pair<double, double> axisRange(double lo, double hi, double min_span);
std::string px(double value);
std::string svgOpen(const char* id, int width, int height, const char* label);
std::string svgText(double x, double y, const std::string& html, const char* css_class,
                    const char* anchor = "start");
std::string svgLine(double x1, double y1, double x2, double y2, const char* css_class);
std::string svgRect(double x, double y, double width, double height, const char* css_class,
                    const std::string& title_html = "");
std::string svgEmpty(const Plot& plot, const char* message);
std::string clipToPlot(const Plot& plot);
std::vector<Point> thinToPeaks(const std::vector<Point>& points, std::size_t limit);
std::string polyline(const std::vector<Point>& points, const Scale& x, const Scale& y,
                     const char* css_class);
std::string area(const std::vector<Point>& points, const Scale& x, const Scale& y,
                 const char* css_class);
void drawXAxis(std::string& svg, const Plot& plot, const Scale& x, const Ticks& ticks,
               const Labeler& label, const char* title);
void drawYAxis(std::string& svg, const Plot& plot, const Scale& y, const Ticks& ticks,
               const Labeler& label, const char* title, bool right_side, const char* tick_class);
std::string legend(const std::vector<std::pair<const char*, std::string>>& entries);
const char* roleClass(const std::string& role);
const char* findingColour(int index);

// Transparent columns over a chart whose tooltips give the values of each stretch of samples:
// `describe(start, end)` is the tooltip (HTML) of samples [start, end).
template <typename Describe>
std::string hoverColumns(const Plot& plot, const Scale& x, const std::vector<double>& xs,
                         std::size_t limit, const Describe& describe) {
  if (xs.empty()) return "";
  std::string out = "<g class=\"hover\">";
  std::size_t stretch = (xs.size() + limit - 1) / limit;
  for (std::size_t start = 0; start < xs.size(); start += stretch) {
    std::size_t end = std::min(xs.size(), start + stretch);
    double left = start == 0 ? plot.left : (x(xs[start - 1]) + x(xs[start])) / 2;
    double right = end == xs.size() ? plot.right : (x(xs[end - 1]) + x(xs[end])) / 2;
    left = std::clamp(left, plot.left, plot.right);
    right = std::clamp(right, plot.left, plot.right);
    out += svgRect(left, plot.top, right - left, plot.bottom - plot.top, "column",
                   describe(start, end));
  }
  return out + "</g>";
}

}  // namespace memseal::report::html
