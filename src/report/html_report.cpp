// One self-contained HTML page from memseal's JSON documents (check, explain, fit): CSS inline,
// charts drawn here as inline SVG, one small constant script. Documents are read leniently: a
// missing field, or one of the wrong type, reads as absent, so an older or damaged file still
// shows.
//
// Safety rules kept throughout this file:
//   - every string that came from a document or the caller passes through escapeHtml before it
//     is written, in element text, SVG <text>/<title> and attribute values alike;
//   - document strings never become class names, ids or anything inside <script>: those come
//     from this file's own constants and loop indices;
//   - numbers are read as numbers only (non-finite ones count as missing) and clamped before
//     they become SVG coordinates.
#include "report/html_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"

namespace memseal::report {

std::string escapeHtml(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

using ReadJson = nlohmann::json;
using common::baseName;

// ---- reading documents leniently ----

const ReadJson& nullJson() {
  static const ReadJson kNull;
  return kNull;
}

const ReadJson& emptyArray() {
  static const ReadJson kEmpty = ReadJson::array();
  return kEmpty;
}

const ReadJson& member(const ReadJson& object, const char* key) {
  if (!object.is_object()) return nullJson();
  auto found = object.find(key);
  return found == object.end() ? nullJson() : *found;
}

// Booleans are not numbers here (nlohmann agrees), and NaN or infinity from a document built in
// code counts as missing: it would otherwise end up as an SVG coordinate.
std::optional<double> numberOf(const ReadJson& value) {
  if (!value.is_number()) return std::nullopt;
  double number = value.get<double>();
  if (!std::isfinite(number)) return std::nullopt;
  return number;
}

std::optional<double> numberAt(const ReadJson& object, const char* key) {
  return numberOf(member(object, key));
}

double numberOr(const ReadJson& object, const char* key, double fallback) {
  return numberAt(object, key).value_or(fallback);
}

std::string textAt(const ReadJson& object, const char* key) {
  const ReadJson& value = member(object, key);
  return value.is_string() ? value.get<std::string>() : std::string();
}

std::optional<bool> flagAt(const ReadJson& object, const char* key) {
  const ReadJson& value = member(object, key);
  if (!value.is_boolean()) return std::nullopt;
  return value.get<bool>();
}

const ReadJson& arrayAt(const ReadJson& object, const char* key) {
  const ReadJson& value = member(object, key);
  return value.is_array() ? value : emptyArray();
}

std::vector<std::string> stringsAt(const ReadJson& object, const char* key) {
  std::vector<std::string> strings;
  for (const ReadJson& value : arrayAt(object, key)) {
    if (value.is_string()) strings.push_back(value.get<std::string>());
  }
  return strings;
}

// Data far outside anything a process can hold still has to become a finite SVG coordinate.
double clampForChart(double value) { return std::clamp(value, -1e18, 1e18); }

// ---- numbers for people (every function here returns HTML-safe text) ----

const char* const kDash = "&#8212;";

std::string bytesText(double bytes) {
  if (!std::isfinite(bytes)) return kDash;
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = std::fabs(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char text[64];
  const char* sign = bytes < 0 ? "-" : "";
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%s%.0f B", sign, value);
  } else {
    std::snprintf(text, sizeof(text), "%s%.1f %s", sign, value, kUnits[unit]);
  }
  return text;
}

std::string bytesText(const std::optional<double>& bytes) {
  return bytes ? bytesText(*bytes) : kDash;
}

// Whole numbers with thousands separators ("12,345"), others with three significant digits.
std::string countText(double count) {
  if (!std::isfinite(count)) return kDash;
  char text[64];
  if (std::fabs(count) < 1e15 && count == std::floor(count)) {
    long long whole = std::llround(count);
    std::string digits = std::to_string(std::llabs(whole));
    std::string grouped = whole < 0 ? "-" : "";
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
      grouped += digits[i];
    }
    return grouped;
  }
  std::snprintf(text, sizeof(text), "%.3g", count);
  return text;
}

std::string countText(const std::optional<double>& count) {
  return count ? countText(*count) : kDash;
}

std::string percentText(double part, double whole) {
  if (!(whole > 0) || !std::isfinite(part)) return kDash;
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f%%", 100.0 * part / whole);
  return text;
}

std::string ratioPercentText(const std::optional<double>& ratio) {
  if (!ratio) return kDash;
  char text[32];
  double percent = 100.0 * *ratio;
  std::snprintf(text, sizeof(text), "%.1f%%", std::fabs(percent) < 0.05 ? 0.0 : percent);
  return text;
}

std::string plural(double count, const char* one, const char* many) {
  return count == 1.0 ? one : many;
}

// ---- HTML pieces ----

std::string numCell(const std::string& html) { return "<td class=\"num\">" + html + "</td>"; }
std::string cell(const std::string& html) { return "<td>" + html + "</td>"; }
std::string codeText(const std::string& text) { return "<code>" + escapeHtml(text) + "</code>"; }
std::string muted(const std::string& html) { return "<span class=\"muted\">" + html + "</span>"; }

// Zero as a dash: autograd graphs hold no storage of their own, so "0 B" would read as a measure.
std::string orDash(double value, const std::string& html) {
  return value == 0 ? muted(kDash) : html;
}

// A headline number: a small label above, a large value, an optional line below.
std::string tile(const std::string& label, const std::string& value_html,
                 const std::string& note_html = "") {
  std::string out = "<div class=\"tile\"><div class=\"label\">" + label +
                    "</div><div class=\"value\">" + value_html + "</div>";
  if (!note_html.empty()) out += "<div class=\"note\">" + note_html + "</div>";
  return out + "</div>";
}

// Hints mark code with backticks (`total_loss += loss`): shown as <code>. The text is escaped
// piece by piece, so a backtick can never open a way around the escaping.
std::string richText(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t open = text.find('`', start);
    std::size_t close = open == std::string::npos ? open : text.find('`', open + 1);
    if (close == std::string::npos) {
      out += escapeHtml(text.substr(start));
      break;
    }
    out += escapeHtml(text.substr(start, open - start));
    out += codeText(text.substr(open + 1, close - open - 1));
    start = close + 1;
  }
  return out;
}

// A finding's or a device's explanation in its box; nothing when there is none.
std::string hintHtml(const char* title, const std::string& hint) {
  if (hint.empty()) return "";
  return std::string("<div class=\"hint\"><div class=\"hint-title\">") + title + "</div><p>" +
         richText(hint) + "</p></div>";
}

std::string notesHtml(const std::vector<std::string>& notes) {
  if (notes.empty()) return "";
  std::string out = "<div class=\"card notes\"><h3>Notes</h3><ul>";
  for (const std::string& note : notes) out += "<li>" + richText(note) + "</li>";
  return out + "</ul></div>";
}

// "aten::mul (inside aten::mse_loss)"
std::string opHtml(const ReadJson& site) {
  std::string op = textAt(site, "op");
  std::string outer = textAt(site, "outer_op");
  if (op.empty() && outer.empty()) return muted("unknown op");
  std::string out = codeText(op.empty() ? outer : op);
  if (!op.empty() && !outer.empty() && outer != op) {
    out += " " + muted("inside") + " " + codeText(outer);
  }
  return out;
}

std::string scopeHtml(const ReadJson& site) {
  std::string scope = textAt(site, "scope");
  return scope.empty() ? muted(kDash) : codeText(scope);
}

std::string shapeText(const ReadJson& shape) {
  if (!shape.is_array()) return "?";
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    std::optional<double> size = numberOf(shape[i]);
    text += size ? countText(*size) : "?";
  }
  return text + "]";
}

// The retained tensors' shapes when they differ: "[8..32, 64]", per dimension min..max.
std::string shapeRangeText(const ReadJson& shapes) {
  const ReadJson& min = arrayAt(shapes, "min");
  const ReadJson& max = arrayAt(shapes, "max");
  if (min.empty() || min.size() != max.size()) return "";
  std::string text = "[";
  for (std::size_t i = 0; i < min.size(); ++i) {
    if (i > 0) text += ", ";
    std::optional<double> low = numberOf(min[i]);
    std::optional<double> high = numberOf(max[i]);
    text += countText(low);
    if (low != high) text += ".." + countText(high);
  }
  text += "]";
  if (std::optional<double> distinct = numberAt(shapes, "distinct")) {
    text += " (" + countText(*distinct) + " distinct shapes)";
  }
  return text;
}

// "[32, 64] Float · requires_grad · grad_fn AddmmBackward0"
std::string tensorHtml(const ReadJson& tensor, const ReadJson& shapes = nullJson()) {
  if (!tensor.is_object()) return muted("no tensor metadata");
  std::string out = "<code>" + shapeText(member(tensor, "shape")) + "</code>";
  std::string dtype = textAt(tensor, "dtype");
  if (!dtype.empty()) out += " " + escapeHtml(dtype);
  std::string device = textAt(tensor, "device");
  if (!device.empty()) out += " on " + escapeHtml(device);
  if (flagAt(tensor, "requires_grad").value_or(false)) out += " &middot; requires_grad";
  std::optional<bool> leaf = flagAt(tensor, "is_leaf");
  if (leaf && !*leaf) out += " &middot; non-leaf";
  std::string grad_fn = textAt(tensor, "grad_fn");
  if (!grad_fn.empty()) out += " &middot; grad_fn " + codeText(grad_fn);
  std::string range = shapeRangeText(shapes);
  if (!range.empty()) out += "<br>" + muted("shapes " + range);
  return out;
}

std::string frameHtml(const ReadJson& frame, std::size_t depth) {
  std::string function = textAt(frame, "function");
  // As the text report showed it where the report was made (older reports: the recorded path).
  std::string file = textAt(frame, "shown_file");
  if (file.empty()) file = common::normalPath(textAt(frame, "file"));
  std::string library = textAt(frame, "library");
  std::string out = "<div class=\"frame\"><span class=\"depth\">#" + std::to_string(depth) +
                    "</span> <code class=\"fn\">" +
                    (function.empty() ? std::string("??") : escapeHtml(function)) + "</code>";
  if (!file.empty()) {
    out += " <span class=\"loc\">" + escapeHtml(file);
    if (std::optional<double> line = numberAt(frame, "line"); line && *line > 0) {
      out += ":" + countText(*line);
    }
    out += "</span>";
  }
  if (!library.empty()) out += " <span class=\"lib\">" + escapeHtml(baseName(library)) + "</span>";
  return out + "</div>";
}

// The user's frames stay in view; each run of internal frames (libtorch, the runtime, memseal,
// Python's own) folds into a <details> that says how many and from where, as the text report does.
std::string stackHtml(const ReadJson& frames) {
  if (!frames.is_array() || frames.empty()) return muted("no stack recorded");
  std::string out = "<div class=\"stack\">";
  std::string run;
  std::size_t run_length = 0;
  std::vector<std::string> run_libraries;
  auto flush = [&] {
    if (run_length == 0) return;
    std::string libraries;
    for (std::size_t i = 0; i < run_libraries.size() && i < 3; ++i) {
      libraries += (i > 0 ? ", " : "") + escapeHtml(run_libraries[i]);
    }
    if (run_libraries.size() > 3) libraries += ", &hellip;";
    out += "<details class=\"internal\"><summary>" + countText(run_length) + " internal " +
           plural(run_length, "frame", "frames") +
           (libraries.empty() ? std::string() : " in " + libraries) + "</summary>" + run +
           "</details>";
    run.clear();
    run_length = 0;
    run_libraries.clear();
  };
  for (std::size_t depth = 0; depth < frames.size(); ++depth) {
    const ReadJson& frame = frames[depth];
    if (!frame.is_object()) continue;
    if (flagAt(frame, "internal").value_or(false)) {
      std::string library = baseName(textAt(frame, "library"));
      if (!library.empty() &&
          std::find(run_libraries.begin(), run_libraries.end(), library) == run_libraries.end()) {
        run_libraries.push_back(library);
      }
      run += frameHtml(frame, depth);
      ++run_length;
      continue;
    }
    flush();
    out += frameHtml(frame, depth);
  }
  flush();
  return out + "</div>";
}

// ---- SVG charts ----

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

// About `target` ticks at 1, 2 or 5 times a power of ten, the range widened to whole ticks.
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
struct ByteTicks {
  Ticks ticks;
  double unit = 1;
  const char* unit_name = "B";
};

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
                    const char* anchor = "start") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" class=\"" + css_class +
         "\" text-anchor=\"" + anchor + "\">" + html + "</text>";
}

std::string svgLine(double x1, double y1, double x2, double y2, const char* css_class) {
  return "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" + px(y2) +
         "\" class=\"" + css_class + "\"/>";
}

std::string svgRect(double x, double y, double width, double height, const char* css_class,
                    const std::string& title_html = "") {
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

using Point = std::pair<double, double>;

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

using Labeler = std::function<std::string(double)>;

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

// Transparent columns over a chart whose tooltips give the values of each stretch of samples.
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

std::string legend(const std::vector<std::pair<const char*, std::string>>& entries) {
  std::string out = "<div class=\"legend\">";
  for (const auto& [swatch, label_html] : entries) {
    out += std::string("<span><i class=\"swatch ") + swatch + "\"></i>" + label_html + "</span>";
  }
  return out + "</div>";
}

// The roles of memseal.explain/1 in their order; colours by role are fixed here, and a role name
// from a document only picks one of these classes.
const char* const kRoles[] = {"parameters",  "gradients",   "optimizer_state",
                              "activations", "temporaries", "other"};

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

// ---- memseal.check/1 ----

struct StepSample {
  double step = 0;
  std::optional<double> live, resident, count, graph_nodes;
};

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

// Tracked bytes (left axis) and resident memory (right axis) per step, warm-up shaded, the step
// from which the leak was clear, and each finding's growth rate as a dashed line from the end of
// warm-up: where the measured line follows a dashed one, that finding is what grows.
std::string timelineChart(const ReadJson& check, const std::vector<StepSample>& samples) {
  constexpr int kWidth = 960;
  constexpr int kHeight = 360;
  const Plot plot{84, 30, kWidth - 86.0, kHeight - 48.0};
  std::string svg = svgOpen("timeline-chart", kWidth, kHeight,
                            "Tracked tensor bytes and resident memory per step");
  std::vector<Point> live, resident;
  for (const StepSample& sample : samples) {
    if (sample.live) live.emplace_back(sample.step, clampForChart(*sample.live));
    if (sample.resident && *sample.resident > 0) {
      resident.emplace_back(sample.step, clampForChart(*sample.resident));
    }
  }
  if (live.empty() && resident.empty()) {
    return svg + svgEmpty(plot, "no per-step samples in this report") + "</svg>";
  }
  double first_step = samples.front().step;
  double last_step = std::max(samples.back().step, first_step + 1);
  double warmup = clampForChart(numberOr(check, "warmup", 0));

  struct Growth {
    int index;
    bool resident_axis;
    double x0, y0, x1, y1;
    std::string title;
  };
  std::vector<Growth> growths;
  const ReadJson& findings = arrayAt(check, "findings");
  double growth_start = std::clamp(warmup - 1, first_step, last_step);
  for (std::size_t i = 0; i < findings.size(); ++i) {
    const ReadJson& finding = findings[i];
    double rate = clampForChart(numberOr(finding, "bytes_per_step", 0));
    if (!(rate > 0)) continue;
    bool resident_axis = growsResident(finding);
    const std::vector<Point>& series = resident_axis ? resident : live;
    auto base = std::find_if(series.begin(), series.end(),
                             [&](const Point& point) { return point.first >= growth_start; });
    if (base == series.end()) continue;
    int index = static_cast<int>(i) + 1;
    growths.push_back({index, resident_axis, base->first, base->second, last_step,
                       base->second + rate * (last_step - base->first),
                       "[" + std::to_string(index) + "] " +
                           escapeHtml(textAt(finding, "category")) + ": +" + bytesText(rate) +
                           " per step" + (resident_axis ? " (resident memory)" : "")});
  }

  Scale x{first_step, last_step, plot.left, plot.right};
  Ticks x_ticks = stepTicks(first_step, last_step);

  // The axes fit what comes after warm-up (warm-up's climb is clipped at the edge): the chart is
  // there to show whether memory keeps growing once the loop is steady.
  std::size_t steady_samples = std::count_if(samples.begin(), samples.end(),
                                             [&](const auto& s) { return s.step >= growth_start; });
  double fit_from = steady_samples >= 2 ? growth_start : first_step;
  auto byteAxis = [&](const std::vector<Point>& series, bool resident_axis) {
    double lo = 1e300, hi = -1e300;
    for (const Point& point : series) {
      if (point.first < fit_from) continue;
      lo = std::min(lo, point.second);
      hi = std::max(hi, point.second);
    }
    if (lo > hi) lo = hi = series.front().second;
    for (const Growth& growth : growths) {
      if (growth.resident_axis != resident_axis) continue;
      lo = std::min(lo, growth.y0);
      hi = std::max(hi, growth.y1);
    }
    auto [range_lo, range_hi] = axisRange(lo, hi, std::max(4096.0, 0.02 * std::fabs(hi)));
    return byteTicks(range_lo, range_hi, 6);
  };
  std::optional<ByteTicks> live_ticks, resident_ticks;
  Scale live_y, resident_y;
  if (!live.empty()) {
    live_ticks = byteAxis(live, false);
    live_y = {live_ticks->ticks.lo, live_ticks->ticks.hi, plot.bottom, plot.top};
  }
  if (!resident.empty()) {
    resident_ticks = byteAxis(resident, true);
    resident_y = {resident_ticks->ticks.lo, resident_ticks->ticks.hi, plot.bottom, plot.top};
  }

  if (warmup > first_step) {
    double right = x(std::min(warmup - 0.5, last_step));
    svg += svgRect(plot.left, plot.top, right - plot.left, plot.bottom - plot.top, "warmup");
    if (right - plot.left > 60) svg += svgText(plot.left + 6, plot.top + 14, "warm-up", "band");
  }
  drawXAxis(svg, plot, x, x_ticks, compactNumber, "step");
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
  if (!resident.empty()) svg += polyline(thinToPeaks(resident, 1200), x, resident_y, "resident");
  if (!live.empty()) {
    std::vector<Point> thinned = thinToPeaks(live, 1200);
    svg += area(thinned, x, live_y, "live-area");
    svg += polyline(thinned, x, live_y, "live");
  }
  for (const Growth& growth : growths) {
    const Scale& y = growth.resident_axis ? resident_y : live_y;
    svg += std::string("<g class=\"growth ") + findingColour(growth.index) + "\">" +
           svgLine(x(growth.x0), y(growth.y0), x(growth.x1), y(growth.y1), "growth-line") + "</g>";
  }
  svg += "</svg>";

  // Labels of lines ending at the same height move apart so that each index stays readable.
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

  if (std::optional<double> detected = numberAt(check, "detected_at_step");
      detected && isLeak(check) && *detected >= first_step && *detected <= last_step) {
    double at = x(*detected);
    svg += svgLine(at, plot.top - 4, at, plot.bottom, "detected");
    bool near_right = at > plot.right - 150;
    svg += svgText(near_right ? at - 6 : at + 6, plot.top + 2,
                   "leak clear from step " + countText(*detected), "detected-label",
                   near_right ? "end" : "start");
  }

  std::vector<double> xs;
  for (const StepSample& sample : samples) xs.push_back(sample.step);
  svg += hoverColumns(plot, x, xs, 240, [&](std::size_t start, std::size_t end) {
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

std::string growthTiles(const ReadJson& finding) {
  std::string out = "<div class=\"tiles small\">";
  auto perStep = [&](const char* key) {
    std::optional<double> rate = numberAt(finding, key);
    return rate ? "+" + bytesText(*rate) + "/step" : std::string(kDash);
  };
  std::optional<double> count = numberAt(finding, "count_per_step");
  std::string retained = textAt(finding, "retained");
  if (textAt(finding, "category") == "untracked-growth") {
    out += tile("grows", perStep("bytes_per_step"), "resident memory beyond tracked");
    out += tile("explained by tensors and graphs", perStep("explained_bytes_per_step"));
    return out + "</div>";
  }
  bool graphs = retained == "autograd graph nodes";
  out += tile("grows", perStep("bytes_per_step"), graphs ? "resident memory" : "");
  out += tile("per step", countText(count),
              graphs ? plural(count.value_or(0), "autograd graph", "autograd graphs")
                     : plural(count.value_or(0), "allocation", "allocations"));
  std::optional<double> survivors = numberAt(finding, "survivors");
  std::optional<double> survivor_bytes = numberAt(finding, "survivor_bytes");
  out += tile("retained at the end", countText(survivors),
              graphs           ? "autograd graphs"
              : survivor_bytes ? bytesText(*survivor_bytes)
                               : "");
  std::optional<double> with = numberAt(finding, "steps_with_survivors");
  std::optional<double> observed = numberAt(finding, "steps_observed");
  if (with || observed) {
    out += tile("steps with survivors", countText(with), "of " + countText(observed) + " observed");
  }
  return out + "</div>";
}

std::string partsHtml(const ReadJson& parts) {
  if (!parts.is_array() || parts.empty()) return "";
  std::string out =
      "<h4>What it holds</h4><div class=\"table-wrap\"><table class=\"parts\"><thead><tr>"
      "<th>retained</th><th class=\"num\">per step</th><th class=\"num\">count/step</th>"
      "<th class=\"num\">survivors</th><th>made by</th><th>scope</th><th>tensor</th>"
      "<th>stack</th></tr></thead><tbody>";
  for (const ReadJson& part : parts) {
    if (!part.is_object()) continue;
    double rate = numberOr(part, "bytes_per_step", 0);
    bool graphs = textAt(part, "retained") == "autograd graph nodes";
    out += "<tr>" + cell(escapeHtml(textAt(part, "retained"))) +
           numCell(orDash(rate, "+" + bytesText(rate))) +
           numCell(countText(numberOr(part, "count_per_step", 0))) +
           numCell(countText(numberAt(part, "survivors")) +
                   (graphs ? "" : "<br>" + muted(bytesText(numberAt(part, "survivor_bytes"))))) +
           cell(opHtml(part)) + cell(scopeHtml(part)) +
           cell(tensorHtml(member(part, "tensor"), member(part, "shapes")));
    const ReadJson& frames = member(part, "frames");
    out += cell(frames.is_array() && !frames.empty()
                    ? "<details><summary>" + countText(frames.size()) + " frames</summary>" +
                          stackHtml(frames) + "</details>"
                    : muted(kDash));
    out += "</tr>";
  }
  return out + "</tbody></table></div>";
}

// Python's holders name what keeps a finding's tensors alive ("list `losses` (global of
// train.py)"); the ones without a valid finding index are shown on their own.
std::string holderHtml(const ReadJson& holder) {
  std::string out = "<li>" + richText(textAt(holder, "description"));
  std::vector<std::string> details;
  std::string kind = textAt(holder, "kind");
  if (!kind.empty()) details.push_back(escapeHtml(kind));
  if (std::optional<double> tensors = numberAt(holder, "tensors"); tensors && *tensors > 1) {
    details.push_back("holds " + countText(*tensors) + " of them");
  }
  if (flagAt(holder, "via_graph").value_or(false)) details.push_back("through an autograd graph");
  if (!details.empty()) {
    std::string joined;
    for (const std::string& detail : details) joined += (joined.empty() ? "" : ", ") + detail;
    out += " " + muted("(" + joined + ")");
  }
  return out + "</li>";
}

// What a cause held before it was freed together (a phase's end, a reset): when, how often, and
// the most it held.
std::string freedHtml(const ReadJson& freed) {
  if (!freed.is_object()) return "";
  double times = numberOr(freed, "times", 1);
  std::string phase = textAt(freed, "phase");
  std::string where = phase.empty() ? "" : " of phase <code>" + escapeHtml(phase) + "</code>";
  std::string text;
  if (times <= 1) {
    text = "Held over steps " + countText(numberAt(freed, "first_step")) + "&ndash;" +
           countText(numberAt(freed, "last_step")) + where + ", then freed together in step " +
           countText(numberAt(freed, "freed_at_step")) + ".";
  } else {
    text = "Built up and freed together " + countText(times) + " times, every ~" +
           countText(std::round(numberOr(freed, "steps_per_time", 0))) + " steps (steps " +
           countText(numberAt(freed, "first_step")) + "&ndash;" +
           countText(numberAt(freed, "last_step")) + where + ").";
  }
  text += " At most <b>" + bytesText(numberAt(freed, "peak_bytes")) + "</b>" +
          (times > 1 ? " each time" : "") + ".";
  if (flagAt(freed, "building_up").value_or(false)) text += " Building up again now.";
  return "<div class=\"hint freed\"><h4>Held, then freed</h4><p>" + text +
         " Freed when a phase or the function holding it ended, or when it was reset; until "
         "then it grows with every step, so a longer phase runs out of memory.</p></div>";
}

// The phases of the steps (training, validation, ...; loops memseal run found), when more than one.
std::string phasesHtml(const ReadJson& check) {
  const ReadJson& phases = arrayAt(check, "phases");
  if (phases.size() < 2) return "";
  std::string out =
      "<div class=\"card phases\"><h3>Phases</h3><div class=\"table-wrap\"><table><thead><tr>"
      "<th>phase</th><th class=\"num\">first step</th><th class=\"num\">steps</th>"
      "<th class=\"num\">runs</th><th>backward</th></tr></thead><tbody>";
  for (const ReadJson& phase : phases) {
    if (!phase.is_object()) continue;
    std::string name = textAt(phase, "name");
    out += "<tr>" + cell(name.empty() ? muted("(unnamed)") : escapeHtml(name)) +
           numCell(countText(numberAt(phase, "first_step"))) +
           numCell(countText(numberAt(phase, "steps"))) +
           numCell(countText(numberAt(phase, "runs"))) +
           cell(flagAt(phase, "backward_ran").value_or(false) ? "ran" : muted("none")) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string findingCard(const ReadJson& finding, int index, const ReadJson& holders) {
  std::string category = textAt(finding, "category");
  std::string retained = textAt(finding, "retained");
  std::string out = "<article class=\"finding-card card\" id=\"finding-" + std::to_string(index) +
                    "\"><header><span class=\"index " + findingColour(index) + "\">" +
                    std::to_string(index) + "</span><h3>" +
                    (category.empty() ? muted("finding") : escapeHtml(category)) + "</h3>";
  if (!retained.empty()) out += "<span class=\"pill\">" + escapeHtml(retained) + "</span>";
  out += "</header>" + growthTiles(finding);
  if (category != "untracked-growth") {
    out += "<dl class=\"facts\"><dt>made by</dt><dd>" + opHtml(finding) + "</dd>";
    out += "<dt>scope</dt><dd>" + scopeHtml(finding) + "</dd>";
    out += "<dt>tensor</dt><dd>" +
           tensorHtml(member(finding, "tensor"), member(finding, "shapes")) + "</dd>";
    out += "<dt>stack</dt><dd>" + stackHtml(member(finding, "frames")) + "</dd></dl>";
    out += partsHtml(member(finding, "parts"));
  }
  std::string holder_items;
  for (const ReadJson& holder : holders) {
    if (numberOr(holder, "finding", -1) == index - 1) holder_items += holderHtml(holder);
  }
  if (!holder_items.empty()) {
    out +=
        "<div class=\"holders\"><h4>What holds it (Python)</h4><ul>" + holder_items + "</ul></div>";
  }
  out += freedHtml(member(finding, "freed"));
  return out + hintHtml("Cause and fix", textAt(finding, "hint")) + "</article>";
}

// The innermost frame that is the user's: where to look first.
std::string firstUserFrameHtml(const ReadJson& site) {
  for (const ReadJson& frame : arrayAt(site, "frames")) {
    if (!frame.is_object() || flagAt(frame, "internal").value_or(false)) continue;
    std::string function = textAt(frame, "function");
    std::string file = baseName(textAt(frame, "file"));
    std::string out = codeText(function.empty() ? "??" : function);
    if (!file.empty()) {
      out += " " + muted(escapeHtml(file) + ":" + countText(numberOr(frame, "line", 0)));
    }
    return out;
  }
  return muted(kDash);
}

// Findings keep their sites (and a cause's parts theirs); ranked by what is retained at the end,
// this is the check report's answer to "where is the memory".
std::string topSitesHtml(const ReadJson& findings) {
  struct Row {
    std::string label;
    int finding;
    const ReadJson* site;
    double survivor_bytes;
  };
  std::vector<Row> rows;
  for (std::size_t i = 0; i < findings.size(); ++i) {
    const ReadJson& finding = findings[i];
    if (!finding.is_object() || textAt(finding, "category") == "untracked-growth") continue;
    int index = static_cast<int>(i) + 1;
    const ReadJson& parts = arrayAt(finding, "parts");
    if (parts.size() > 1) {
      for (std::size_t p = 0; p < parts.size(); ++p) {
        if (!parts[p].is_object()) continue;
        rows.push_back({std::to_string(index) + "." + std::to_string(p + 1), index, &parts[p],
                        numberOr(parts[p], "survivor_bytes", 0)});
      }
    } else {
      rows.push_back(
          {std::to_string(index), index, &finding, numberOr(finding, "survivor_bytes", 0)});
    }
  }
  if (rows.empty()) return "";
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.survivor_bytes > b.survivor_bytes; });
  std::string out =
      "<div class=\"card\"><h3>Top sites by retained bytes</h3><div class=\"table-wrap\">"
      "<table class=\"top-sites\"><thead><tr><th>finding</th><th>made by</th><th>scope</th>"
      "<th>where</th><th class=\"num\">survivors</th><th class=\"num\">retained</th>"
      "<th class=\"num\">per step</th></tr></thead><tbody>";
  for (const Row& row : rows) {
    const ReadJson& site = *row.site;
    double rate = numberOr(site, "bytes_per_step", 0);
    out += "<tr><td><a href=\"#finding-" + std::to_string(row.finding) + "\">" + row.label +
           "</a></td>" + cell(opHtml(site)) + cell(scopeHtml(site)) +
           cell(firstUserFrameHtml(site)) + numCell(countText(numberAt(site, "survivors"))) +
           numCell(orDash(row.survivor_bytes, bytesText(row.survivor_bytes))) +
           numCell(orDash(rate, "+" + bytesText(rate))) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string cycleGarbageHtml(const ReadJson& garbage) {
  if (!garbage.is_object()) return "";
  double tensors = numberOr(garbage, "tensors", 0);
  std::string out = "<h4>Garbage in reference cycles</h4>";
  if (!(tensors > 0))
    return out + "<p>" + muted("none: no tensor waits for the collector") + "</p>";
  out += "<p>" + countText(tensors) + " " + plural(tensors, "tensor", "tensors") + " (" +
         bytesText(numberOr(garbage, "bytes", 0)) +
         ") kept alive only by reference cycles: <code>gc.collect()</code> frees them, reference "
         "counting never does.</p>";
  std::string types;
  for (const ReadJson& type : arrayAt(garbage, "types")) {
    if (!type.is_object()) continue;
    types += "<tr>" + cell(codeText(textAt(type, "type"))) +
             numCell(countText(numberOr(type, "objects", 0))) + "</tr>";
  }
  if (!types.empty()) {
    out +=
        "<table class=\"compact\"><thead><tr><th>on the cycles</th><th class=\"num\">objects"
        "</th></tr></thead><tbody>" +
        types + "</tbody></table>";
  }
  std::vector<std::string> explained = stringsAt(garbage, "findings");
  if (!explained.empty()) {
    std::string joined;
    for (const std::string& category : explained) {
      joined += (joined.empty() ? "" : ", ") + codeText(category);
    }
    out += "<p>Not a leak: what looked like " + joined +
           " is this garbage, waiting for the collector.</p>";
  }
  return out;
}

std::string pythonHtml(const ReadJson& python, std::size_t finding_count) {
  if (!python.is_object()) return "";
  std::string out = "<div class=\"card python\"><h3>Python</h3>";
  std::string holders;
  for (const ReadJson& holder : arrayAt(python, "holders")) {
    if (!holder.is_object()) continue;
    double finding = numberOr(holder, "finding", -1);
    std::string prefix = "";
    if (finding >= 0 && finding < static_cast<double>(finding_count)) {
      int index = static_cast<int>(finding) + 1;
      prefix =
          "<a href=\"#finding-" + std::to_string(index) + "\">[" + std::to_string(index) + "]</a> ";
    }
    std::string item = holderHtml(holder);
    holders += "<li>" + prefix + item.substr(4);  // after holderHtml's own "<li>"
  }
  if (!holders.empty()) out += "<h4>What holds the findings</h4><ul>" + holders + "</ul>";
  out += cycleGarbageHtml(member(python, "cycle_garbage"));
  return out + "</div>";
}

// ---- memseal.explain/1 ----

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
  std::vector<Point> points;
  for (const ReadJson& entry : arrayAt(explain, "timeline")) {
    std::optional<double> event = numberAt(entry, "event");
    std::optional<double> live = numberAt(entry, "live_bytes");
    if (event && live) points.emplace_back(clampForChart(*event), clampForChart(*live));
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const Point& a, const Point& b) { return a.first < b.first; });
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
  Ticks x_ticks = niceTicks(first, last, 10);
  x_ticks.values.erase(std::remove_if(x_ticks.values.begin(), x_ticks.values.end(),
                                      [&](double value) { return value < first || value > last; }),
                       x_ticks.values.end());
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
  out += modulesTable(explain, peak_total);
  out += sitesTable(explain, peak_total);
  out += tensorsTable(explain);
  out += stepPeaksTable(explain);
  out += notesHtml(stringsAt(explain, "notes"));
  return out + "</section>";
}

// ---- memseal.fit/1 ----

struct FitModel {
  enum class Kind { kNone, kLinear, kQuadratic } kind = Kind::kNone;
  double c0 = 0, c1 = 0, c2 = 0;
  double operator()(double size) const { return c0 + c1 * size + c2 * size * size; }
};

FitModel fitModel(const ReadJson& fit) {
  FitModel model;
  std::string name = textAt(fit, "model");
  const ReadJson& linear = member(fit, "linear");
  const ReadJson& quadratic = member(fit, "quadratic");
  if (name == "linear" && numberAt(linear, "slope")) {
    model.kind = FitModel::Kind::kLinear;
    model.c0 = numberOr(linear, "intercept", 0);
    model.c1 = numberOr(linear, "slope", 0);
  } else if (name == "quadratic" && numberAt(quadratic, "c2")) {
    model.kind = FitModel::Kind::kQuadratic;
    model.c0 = numberOr(quadratic, "c0", 0);
    model.c1 = numberOr(quadratic, "c1", 0);
    model.c2 = numberOr(quadratic, "c2", 0);
  }
  return model;
}

// Peak against size: the measured points, the model through them (solid where measured, dashed
// where extrapolated up to the predicted size), the budget and the share the margin leaves.
std::string fitChart(const ReadJson& fit) {
  constexpr int kWidth = 960;
  constexpr int kHeight = 380;
  const Plot plot{84, 24, kWidth - 30.0, kHeight - 48.0};
  std::string svg = svgOpen("fit-chart", kWidth, kHeight, "Peak bytes against size");
  std::vector<Point> points;
  for (const ReadJson& point : arrayAt(fit, "points")) {
    std::optional<double> size = numberAt(point, "size");
    std::optional<double> bytes = numberAt(point, "peak_bytes");
    if (size && bytes) points.emplace_back(clampForChart(*size), clampForChart(*bytes));
  }
  std::sort(points.begin(), points.end());
  std::optional<double> budget = numberAt(fit, "budget_bytes");
  double margin = std::clamp(numberOr(fit, "margin", 0), 0.0, 1.0);
  std::optional<double> predicted_size = numberAt(fit, "predicted_max_size");
  std::optional<double> predicted_peak = numberAt(fit, "predicted_peak_bytes");
  const ReadJson& verify = member(fit, "verify");
  std::optional<double> verify_size = numberAt(verify, "size");
  std::optional<double> verify_measured = numberAt(verify, "measured_peak_bytes");
  if (points.empty() && !budget) {
    return svg + svgEmpty(plot, "no measured sizes in this report") + "</svg>";
  }

  FitModel model = fitModel(fit);
  double max_size = points.empty() ? 1 : points.back().first;
  double curve_end = max_size;
  if (predicted_size) curve_end = std::max(curve_end, clampForChart(*predicted_size));
  double x_hi = curve_end;
  if (verify_size) x_hi = std::max(x_hi, clampForChart(*verify_size));
  double y_hi = 0;
  for (const Point& point : points) y_hi = std::max(y_hi, point.second);
  if (budget) y_hi = std::max(y_hi, clampForChart(*budget));
  if (predicted_peak) y_hi = std::max(y_hi, clampForChart(*predicted_peak));
  if (verify_measured) y_hi = std::max(y_hi, clampForChart(*verify_measured));

  // The curve is sampled densely enough for a quadratic to look smooth.
  std::vector<Point> measured_curve, extrapolated_curve;
  if (model.kind != FitModel::Kind::kNone && !points.empty()) {
    double start = points.front().first;
    constexpr int kSamples = 48;
    for (int i = 0; i <= kSamples; ++i) {
      double size = start + (max_size - start) * i / kSamples;
      measured_curve.emplace_back(size, clampForChart(model(size)));
    }
    if (curve_end > max_size) {
      for (int i = 0; i <= kSamples; ++i) {
        double size = max_size + (curve_end - max_size) * i / kSamples;
        extrapolated_curve.emplace_back(size, clampForChart(model(size)));
      }
    }
    for (const auto* curve : {&measured_curve, &extrapolated_curve}) {
      for (const Point& point : *curve) y_hi = std::max(y_hi, point.second);
    }
  }

  Ticks x_ticks = niceTicks(0, std::max(x_hi * 1.04, 1.0), 10);
  ByteTicks y_ticks = byteTicks(0, std::max(y_hi * 1.06, 1024.0), 6);
  Scale x{x_ticks.lo, x_ticks.hi, plot.left, plot.right};
  Scale y{y_ticks.ticks.lo, y_ticks.ticks.hi, plot.bottom, plot.top};
  drawXAxis(svg, plot, x, x_ticks, compactNumber, "size");
  drawYAxis(
      svg, plot, y, y_ticks.ticks, [&](double value) { return byteTickLabel(value, y_ticks); },
      "peak tracked bytes", false, "tick");

  if (budget) {
    double at = y(*budget);
    svg += "<g class=\"budget\"><title>budget " + bytesText(*budget) + "</title>" +
           svgLine(plot.left, at, plot.right, at, "budget-line") +
           svgText(plot.left + 6, at - 6, "budget " + bytesText(*budget), "budget-label") + "</g>";
    if (margin > 0) {
      double usable = *budget * (1 - margin);
      double usable_at = y(usable);
      svg += "<g class=\"usable\"><title>budget less the " + ratioPercentText(margin) +
             " margin: " + bytesText(usable) + "</title>" +
             svgLine(plot.left, usable_at, plot.right, usable_at, "usable-line") +
             svgText(plot.left + 6, usable_at + 15,
                     "budget less " + ratioPercentText(margin) + " margin " + bytesText(usable),
                     "usable-label") +
             "</g>";
    }
  }
  if (!measured_curve.empty()) svg += polyline(measured_curve, x, y, "model");
  if (!extrapolated_curve.empty()) svg += polyline(extrapolated_curve, x, y, "model extrapolated");
  for (const Point& point : points) {
    svg += "<circle class=\"point\" cx=\"" + px(x(point.first)) + "\" cy=\"" + px(y(point.second)) +
           "\" r=\"5\"><title>size " + countText(point.first) + ": peak " +
           bytesText(point.second) + "</title></circle>";
  }
  if (predicted_size && predicted_peak) {
    double cx = x(*predicted_size);
    double cy = y(*predicted_peak);
    svg += "<g class=\"prediction\"><title>largest size that fits: " + countText(*predicted_size) +
           ", predicted peak " + bytesText(*predicted_peak) + "</title>" +
           svgLine(cx, cy, cx, plot.bottom, "prediction-line") + "<path d=\"M" + px(cx) + "," +
           px(cy - 7) + " L" + px(cx + 7) + "," + px(cy) + " L" + px(cx) + "," + px(cy + 7) + " L" +
           px(cx - 7) + "," + px(cy) + " Z\"/>" +
           // By the axis: up at the point, the budget lines and the curve meet.
           svgText(cx - 6, plot.bottom - 8, "max size " + countText(*predicted_size),
                   "prediction-label", "end") +
           "</g>";
  }
  if (verify_size && verify_measured) {
    double cx = x(*verify_size);
    double cy = y(*verify_measured);
    svg += "<g class=\"verify\"><title>verified at size " + countText(*verify_size) +
           ": measured " + bytesText(*verify_measured) + "</title>" +
           svgRect(cx - 6, cy - 6, 12, 12, "verify-mark") + "</g>";
  }
  return svg + "</svg>";
}

std::string fitSection(const ReadJson& fit) {
  std::string out = "<section id=\"fit\"><h2>How far the size can grow</h2><div class=\"tiles\">";
  std::string model = textAt(fit, "model");
  std::optional<bool> is_linear = flagAt(fit, "is_linear");
  std::string model_note;
  if (is_linear) model_note = *is_linear ? "peak grows linearly" : "peak is not linear in size";
  if (std::optional<double> tolerance = numberAt(fit, "tolerance")) {
    model_note +=
        (model_note.empty() ? "" : ", ") + std::string("tolerance ") + ratioPercentText(tolerance);
  }
  out += tile("model", model.empty() ? kDash : escapeHtml(model), model_note);
  std::optional<double> predicted_size = numberAt(fit, "predicted_max_size");
  std::string refusal = textAt(fit, "refusal");
  if (predicted_size) {
    out += tile("largest size that fits", countText(*predicted_size),
                "predicted peak " + bytesText(numberAt(fit, "predicted_peak_bytes")));
  } else {
    out += tile("largest size that fits", "none",
                refusal.empty() ? "no prediction" : richText(refusal));
  }
  std::string budget_note = escapeHtml(textAt(fit, "budget_source"));
  if (std::optional<double> margin = numberAt(fit, "margin")) {
    budget_note += (budget_note.empty() ? "" : ", ") + ratioPercentText(margin) + " kept free";
  }
  out += tile("budget", bytesText(numberAt(fit, "budget_bytes")), budget_note);
  const ReadJson& verify = member(fit, "verify");
  if (verify.is_object()) {
    std::optional<bool> within = flagAt(verify, "within_budget");
    std::string value = within ? (*within ? "<span class=\"good\">&#10003; within budget</span>"
                                          : "<span class=\"bad\">&#10007; over budget</span>")
                               : kDash;
    out += tile("verified", value,
                "size " + countText(numberAt(verify, "size")) + ": measured " +
                    bytesText(numberAt(verify, "measured_peak_bytes")) + ", predicted " +
                    bytesText(numberAt(verify, "predicted_peak_bytes")) + ", error " +
                    ratioPercentText(numberAt(verify, "relative_error")));
  }
  out += "</div>";
  if (!predicted_size && !refusal.empty()) {
    out += "<div class=\"card refusal\"><strong>No prediction:</strong> " + richText(refusal) +
           "</div>";
  }
  out += "<div class=\"card\"><h3>Peak against size</h3>" + fitChart(fit) +
         legend({{"point", "measured peak"},
                 {"model", "fitted model (dashed: extrapolated)"},
                 {"budget", "budget"},
                 {"dashed usable", "budget less the margin"},
                 {"prediction", "largest size predicted to fit"},
                 {"verify", "verification run"}}) +
         "</div>";

  FitModel fitted = fitModel(fit);
  std::string rows;
  for (const ReadJson& point : arrayAt(fit, "points")) {
    std::optional<double> size = numberAt(point, "size");
    std::optional<double> bytes = numberAt(point, "peak_bytes");
    if (!size) continue;
    std::string predicted = kDash, residual = kDash;
    if (fitted.kind != FitModel::Kind::kNone) {
      predicted = bytesText(fitted(*size));
      if (bytes && *bytes != 0) {
        residual = ratioPercentText((fitted(*size) - *bytes) / *bytes);
      }
    }
    rows += "<tr>" + numCell(countText(*size)) + numCell(bytesText(bytes)) + numCell(predicted) +
            numCell(residual) + "</tr>";
  }
  out += "<div class=\"card\"><h3>Measured sizes and the model</h3>";
  if (!rows.empty()) {
    out +=
        "<div class=\"table-wrap\"><table class=\"fit-points compact\"><thead><tr><th "
        "class=\"num\">size</th><th class=\"num\">peak</th><th class=\"num\">model</th><th "
        "class=\"num\">residual</th></tr></thead><tbody>" +
        rows + "</tbody></table></div>";
  }
  const ReadJson& linear = member(fit, "linear");
  if (linear.is_object()) {
    out += "<p><strong>linear</strong>: peak = " + bytesText(numberAt(linear, "intercept")) +
           " + " + bytesText(numberAt(linear, "slope")) + " &#215; size " +
           muted("(largest residual " +
                 ratioPercentText(numberAt(linear, "max_relative_residual")) + ")") +
           "</p>";
  }
  const ReadJson& quadratic = member(fit, "quadratic");
  if (quadratic.is_object()) {
    out += "<p><strong>quadratic</strong>: peak = " + bytesText(numberAt(quadratic, "c0")) + " + " +
           bytesText(numberAt(quadratic, "c1")) + " &#215; size + " +
           bytesText(numberAt(quadratic, "c2")) + " &#215; size&#178; " +
           muted("(largest residual " +
                 ratioPercentText(numberAt(quadratic, "max_relative_residual")) + ")") +
           "</p>";
  }
  return out + "</div></section>";
}

// ---- CUDA memory (the check's optional "devices") ----

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

// Absent when the report has no devices (no CUDA events were seen).
std::string cudaMemoryHtml(const ReadJson& check) {
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

// ---- the check section ----

std::string checkSection(const ReadJson& check) {
  std::vector<StepSample> samples = stepSamples(check);
  const ReadJson& findings = arrayAt(check, "findings");
  const ReadJson& python = member(check, "python");
  std::string out = "<section id=\"check\"><h2>Leak check</h2>";
  out += verdictHtml(check, samples);
  out += timelineCard(check, samples);
  out += phasesHtml(check);
  const ReadJson& holders = arrayAt(python, "holders");
  int index = 0;
  for (const ReadJson& finding : findings) {
    ++index;
    out += findingCard(finding.is_object() ? finding : nullJson(), index, holders);
  }
  out += topSitesHtml(findings);
  out += cudaMemoryHtml(check);
  out += pythonHtml(python, findings.size());
  out += notesHtml(stringsAt(check, "notes"));
  return out + "</section>";
}

// ---- the page ----

// Each document names its schema; one this page was not written for is still shown as far as it
// reads, with a warning instead of a silent guess.
std::string schemaWarning(const ReadJson& document, const char* expected) {
  std::string schema = textAt(document, "schema");
  if (schema.empty() || schema == expected) return "";
  return "<div class=\"card warning\">This document says it is <code>" + escapeHtml(schema) +
         "</code>; this page reads <code>" + expected +
         "</code>, so parts of it may be missing.</div>";
}

const char* const kStyle = R"CSS(
:root{--bg:#f4f6f9;--card:#fff;--text:#1c2430;--muted:#5c6777;--border:#e1e6ed;--accent:#2f63d1;
--live:#2f63d1;--live-fill:rgba(47,99,209,.10);--resident:#8b4fc8;--leak:#c92a2a;--leak-bg:#fff1f1;
--leak-border:#f3c1c1;--ok:#2b8a3e;--ok-bg:#eefbf1;--ok-border:#b9e5c3;--warm:#eef1f5;
--grid:#e9edf2;
--axis:#98a2b0;--code-bg:#f1f4f8;--budget:#c92a2a;--model:#e8590c;
--r-parameters:#4e79a7;--r-gradients:#f28e2b;--r-optimizer:#59a14f;--r-activations:#e15759;
--r-temporaries:#edc948;--r-other:#9aa3ad;--r-unknown:#c8ced6;
--f1:#e8590c;--f2:#d6336c;--f3:#0c8599;--f4:#5f3dc4;--f5:#2b8a3e;--f6:#495057}
@media (prefers-color-scheme:dark){:root{--bg:#12161c;--card:#1a2029;--text:#e3e8ef;--muted:#9aa6b5;
--border:#2b3440;--accent:#7aa2ff;--live:#7aa2ff;--live-fill:rgba(122,162,255,.14);
--resident:#c39bf0;
--leak:#ff8787;--leak-bg:#2e1a1d;--leak-border:#5c2a30;--ok:#69db7c;--ok-bg:#16291c;
--ok-border:#2b5a36;--warm:#222a35;--grid:#262e3a;--axis:#5d6878;--code-bg:#232b36}}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--text);
font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;
font-size:.86em;background:var(--code-bg);border-radius:4px;padding:.05em .35em;
overflow-wrap:break-word}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
.page-header{background:linear-gradient(135deg,#1b2333,#27344d);color:#fff;padding:26px 0 20px}
.wrap{max-width:1180px;margin:0 auto;padding:0 24px}
.brand{font-weight:700;letter-spacing:.12em;text-transform:uppercase;font-size:12px;color:#9fb4dc}
.page-header h1{margin:4px 0 6px;font-size:28px;line-height:1.25;overflow-wrap:anywhere}
.generated{margin:0;color:#c4cfe2;font-size:13px}
nav{margin-top:14px;display:flex;gap:8px;flex-wrap:wrap}
nav a{color:#fff;background:rgba(255,255,255,.12);padding:4px 12px;border-radius:999px;
font-size:13px}
main{padding:8px 0 40px}
h2{font-size:21px;margin:30px 0 12px}
h3{font-size:16px;margin:0 0 12px}
h4{font-size:14px;margin:18px 0 8px;color:var(--muted);text-transform:uppercase;
letter-spacing:.05em}
.card{background:var(--card);border:1px solid var(--border);border-radius:12px;padding:18px 20px;
margin:14px 0;box-shadow:0 1px 2px rgba(16,24,40,.05)}
.muted{color:var(--muted)}.small{font-size:13px}
.how{font-size:13.5px;color:var(--muted)}.how ul{margin:6px 0 0;padding-left:18px}
.verdict{display:flex;gap:16px;align-items:center;border-radius:12px;padding:18px 22px;
border:1px solid;margin:14px 0}
.verdict.leak{background:var(--leak-bg);border-color:var(--leak-border)}
.verdict.no_leak{background:var(--ok-bg);border-color:var(--ok-border)}
.verdict-icon{width:46px;height:46px;border-radius:50%;display:flex;align-items:center;
justify-content:center;font-size:24px;font-weight:700;color:#fff;flex:none}
.leak .verdict-icon{background:var(--leak)}.no_leak .verdict-icon{background:var(--ok)}
.verdict-title{font-size:22px;font-weight:700}
.leak .verdict-title{color:var(--leak)}.no_leak .verdict-title{color:var(--ok)}
.verdict-detail{color:var(--muted)}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(180px,1fr));gap:12px;margin:12px 0}
.tile{background:var(--card);border:1px solid var(--border);border-radius:10px;padding:12px 14px}
.tiles.small .tile{background:var(--bg);border:none}
.tile .label{color:var(--muted);font-size:11.5px;text-transform:uppercase;letter-spacing:.06em}
.tile .value{font-size:22px;font-weight:650;font-variant-numeric:tabular-nums;
overflow-wrap:anywhere}
.tiles.small .value{font-size:18px}
.tile .note{color:var(--muted);font-size:12.5px;overflow-wrap:anywhere}
.good{color:var(--ok)}.bad{color:var(--leak)}
.finding-card header{display:flex;align-items:center;gap:10px;flex-wrap:wrap}
.device-card header{display:flex;align-items:center;gap:10px;flex-wrap:wrap}
.pill.leak{color:var(--leak);border-color:var(--leak-border)}.pill.no_leak{color:var(--ok);border-color:var(--ok-border)}
.finding-card h3{margin:0;font-size:18px}
.index{display:inline-flex;width:28px;height:28px;border-radius:50%;color:#fff;font-weight:700;
align-items:center;justify-content:center;font-size:14px;flex:none}
.index.f1{background:var(--f1)}.index.f2{background:var(--f2)}.index.f3{background:var(--f3)}
.index.f4{background:var(--f4)}.index.f5{background:var(--f5)}.index.f6{background:var(--f6)}
.pill{background:var(--code-bg);border-radius:999px;padding:2px 10px;font-size:12.5px;
color:var(--muted)}
dl.facts{display:grid;grid-template-columns:90px 1fr;gap:8px 14px;margin:14px 0}
dl.facts dt{color:var(--muted);font-size:13px;padding-top:2px}dl.facts dd{margin:0;min-width:0}
.stack{font-size:13px;border-left:3px solid var(--border);padding-left:10px}
.frame,.frame code{padding:1px 0;overflow-wrap:anywhere}
td summary{white-space:nowrap}
.frame .depth{color:var(--muted);font-size:11.5px;display:inline-block;min-width:26px}
.frame code.fn{background:none;padding:0;font-size:12.5px}
.frame .loc{color:var(--accent)}.frame .lib{color:var(--muted);font-size:12px}
details.internal>summary{color:var(--muted);cursor:pointer;font-size:12.5px;padding:1px 0}
details.internal[open]{background:var(--bg);border-radius:6px;padding:2px 6px}
details>summary{cursor:pointer}
.hint{background:#fff8e6;border:1px solid #f5deb0;border-radius:10px;padding:12px 16px;
margin-top:14px}
@media (prefers-color-scheme:dark){.hint{background:#2b2517;border-color:#5a4a24}}
.hint-title{font-weight:650;font-size:13px;text-transform:uppercase;letter-spacing:.05em;
color:#a86b00}
.hint p{margin:4px 0 0}
.holders ul,.python ul,.notes ul{margin:6px 0;padding-left:20px}
.warning{background:#fff8e6;border-color:#f5deb0}
.refusal{border-left:4px solid var(--leak)}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13.5px}
th,td{padding:7px 10px;border-bottom:1px solid var(--border);text-align:left;vertical-align:top}
th{font-size:11.5px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);
font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:hover{background:var(--bg)}
tr.highlight{background:var(--ok-bg)}
table.compact{width:auto;min-width:360px}
svg.chart{width:100%;height:auto;display:block;overflow:visible}
svg.chart text{font-size:12px;fill:var(--muted)}
svg.chart .axis-title{font-size:12.5px;font-weight:600}
svg.chart .grid{stroke:var(--grid)}svg.chart .baseline{stroke:var(--axis)}
svg.chart .tick-live{fill:var(--live)}svg.chart .tick-resident{fill:var(--resident)}
svg.chart .empty{font-size:15px}
.warmup{fill:var(--warm)}svg.chart .band{font-size:11.5px;font-weight:600}
.live{fill:none;stroke:var(--live);stroke-width:2.2;stroke-linejoin:round}
.live-area{fill:var(--live-fill);stroke:none}
.resident{fill:none;stroke:var(--resident);stroke-width:2;stroke-linejoin:round}
.detected{stroke:var(--leak);stroke-width:1.6;stroke-dasharray:5 4}
svg.chart .detected-label{fill:var(--leak);font-weight:600}
.growth-line{stroke-width:2;stroke-dasharray:7 5}
svg.chart .growth-index{fill:#fff;font-weight:700;font-size:11px}
.growth.f1 line,.growth.f1 circle{stroke:var(--f1)}.growth.f1 circle{fill:var(--f1)}
.growth.f2 line,.growth.f2 circle{stroke:var(--f2)}.growth.f2 circle{fill:var(--f2)}
.growth.f3 line,.growth.f3 circle{stroke:var(--f3)}.growth.f3 circle{fill:var(--f3)}
.growth.f4 line,.growth.f4 circle{stroke:var(--f4)}.growth.f4 circle{fill:var(--f4)}
.growth.f5 line,.growth.f5 circle{stroke:var(--f5)}.growth.f5 circle{fill:var(--f5)}
.growth.f6 line,.growth.f6 circle{stroke:var(--f6)}.growth.f6 circle{fill:var(--f6)}
.hover .column{fill:transparent}.hover .column:hover{fill:rgba(47,99,209,.08)}
.role-parameters{fill:var(--r-parameters);background:var(--r-parameters)}
.role-gradients{fill:var(--r-gradients);background:var(--r-gradients)}
.role-optimizer{fill:var(--r-optimizer);background:var(--r-optimizer)}
.role-activations{fill:var(--r-activations);background:var(--r-activations)}
.role-temporaries{fill:var(--r-temporaries);background:var(--r-temporaries)}
.role-other{fill:var(--r-other);background:var(--r-other)}
.role-unknown{fill:var(--r-unknown);background:var(--r-unknown)}
svg .segment{stroke:var(--card);stroke-width:1}
svg.chart .segment-label{fill:#fff;font-weight:600;font-size:13px}
svg.chart .role-name{fill:var(--text);font-size:13px}
svg.chart .role-value{font-size:13px}svg.chart .role-bytes{fill:var(--text);font-weight:650}
td.role{white-space:nowrap}.role-dot{display:inline-block;width:9px;height:9px;border-radius:50%;
margin-right:6px}
svg.mini{vertical-align:middle;border-radius:3px}
.reference{stroke:var(--muted);stroke-width:1.2;stroke-dasharray:4 4}
.peak circle{fill:var(--leak);stroke:var(--card);stroke-width:2}
svg.chart .peak-label{fill:var(--leak);font-weight:650}
.budget-line{stroke:var(--budget);stroke-width:2}
.usable-line{stroke:var(--budget);stroke-width:1.5;stroke-dasharray:6 4;opacity:.75}
svg.chart .budget-label,svg.chart .usable-label{fill:var(--budget);font-weight:600}
.model{fill:none;stroke:var(--model);stroke-width:2.2}.model.extrapolated{stroke-dasharray:7 5}
.point{fill:var(--live);stroke:var(--card);stroke-width:2}
.prediction path{fill:var(--model);stroke:var(--card);stroke-width:1.5}
.prediction-line{stroke:var(--model);stroke-width:1;stroke-dasharray:3 3}
svg.chart .prediction-label{fill:var(--model);font-weight:650}
.verify-mark{fill:none;stroke:var(--ok);stroke-width:2.5}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;font-size:12.5px;color:var(--muted);
margin-top:10px}
.legend span{display:inline-flex;align-items:center;gap:6px}
.swatch{display:inline-block;width:22px;height:10px;border-radius:2px}
.swatch.live{background:var(--live)}.swatch.resident{background:var(--resident)}
.swatch.warm{background:var(--warm);border:1px solid var(--border)}
.swatch.dashed{height:2px;
background:repeating-linear-gradient(90deg,var(--dash) 0 6px,transparent 6px 10px)}
.swatch.detected{--dash:var(--leak)}.swatch.growth{--dash:var(--f1)}
.swatch.reference{--dash:var(--muted)}.swatch.usable{--dash:var(--budget)}
.swatch.peak{background:var(--leak);width:10px;border-radius:50%}
.swatch.point{background:var(--live);width:10px;border-radius:50%}
.swatch.model{background:var(--model);height:2px}
.swatch.budget{background:var(--budget);height:2px}
.swatch.prediction{background:var(--model);width:10px;height:10px;transform:rotate(45deg);
border-radius:1px}
.swatch.verify{border:2px solid var(--ok);width:11px;height:11px;border-radius:1px}
.nothing{text-align:center;color:var(--muted);padding:40px}
footer{color:var(--muted);font-size:12px;text-align:center;padding:0 0 30px}
@media print{
body{background:#fff;font-size:12px}
.page-header{background:none;color:#000;padding:0 0 8px;border-bottom:2px solid #000}
.brand,.generated{color:#444}nav{display:none}
.card,.verdict,.tile{box-shadow:none;break-inside:avoid}
.hover{display:none}tbody tr:hover{background:none}
a{color:inherit}}
)CSS";

// The page's only script: it marks the page ready, collects errors where a test can read them, and
// opens the folded frames before printing. The Content-Security-Policy allows exactly this text by
// its SHA-256 (base64): change one character and kScriptHash must change with it, or the script
// is blocked (the unit test HtmlReport.ScriptHashMatchesScript says the new hash).
const char* const kScript =
    "(function(){var root=document.documentElement;"
    "function report(message){var before=root.dataset.memsealErrors;"
    "root.dataset.memsealErrors=(before?before+\"\\n\":\"\")+message;}"
    "window.onerror=function(message,source,line){report(String(message)+\" (line \"+line+\")\");};"
    "window.addEventListener(\"unhandledrejection\",function(event){"
    "report(\"unhandled rejection: \"+String(event.reason));});"
    "window.addEventListener(\"beforeprint\",function(){"
    "document.querySelectorAll(\"details\").forEach(function(details){details.open=true;});});"
    "window.addEventListener(\"load\",function(){root.dataset.memsealReady=\"1\";});})();";
const char* const kScriptHash = "sha256-TlX7xE48uAX0FA4IHCOVliBtPN/1dOFht+oe3EHHLJ8=";

std::string pageHead(const std::string& title) {
  return std::string(
             "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
             "<meta name=\"generator\" content=\"memseal\">\n"
             // Nothing may load from anywhere: no network, no files; only the inline style and
             // the one script below.
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
             "style-src 'unsafe-inline'; script-src '") +
         kScriptHash + "'\">\n<title>" + escapeHtml(title.empty() ? "memseal report" : title) +
         " &#183; memseal</title>\n<style>" + kStyle + "</style>\n</head>\n";
}

std::string pageHeader(const std::string& title, const std::vector<std::string>& schemas,
                       const std::vector<std::pair<const char*, const char*>>& sections) {
  std::string out =
      "<header class=\"page-header\"><div class=\"wrap\"><div class=\"brand\">"
      "memseal</div><h1>" +
      escapeHtml(title.empty() ? "memseal report" : title) +
      "</h1><p class=\"generated\">Generated by memseal";
  if (!schemas.empty()) {
    out += " from ";
    for (std::size_t i = 0; i < schemas.size(); ++i) {
      out += (i > 0 ? ", " : "") + escapeHtml(schemas[i]);
    }
  }
  out += ". A self-contained page: nothing on it is loaded from elsewhere.</p>";
  if (sections.size() > 1) {
    out += "<nav>";
    for (const auto& [id, name] : sections) {
      out += std::string("<a href=\"#") + id + "\">" + name + "</a>";
    }
    out += "</nav>";
  }
  return out + "</div></header>\n";
}

std::string howToRead(bool check, bool explain, bool fit) {
  std::string out =
      "<div class=\"card how\"><strong>How to read this page.</strong><ul>"
      "<li>Bytes are tracked tensor storage (what libtorch asked for) unless "
      "marked resident (the process&#39;s resident set); 1 KiB = 1024 bytes.</li>"
      "<li>Hover over a chart for the values at that point; folded rows "
      "(&#9656;) open on click and when printed.</li>";
  if (check) {
    out +=
        "<li>A leak is memory kept alive from step to step after warm-up; each finding is "
        "one cause, with the code that made it, an example tensor, and the fix.</li>";
  }
  if (explain) {
    out +=
        "<li>The peak is split by role: parameters, gradients, optimizer state, activations "
        "saved for backward, temporaries, and other.</li>";
  }
  if (fit) {
    out +=
        "<li>The fit predicts the largest size whose peak stays under the budget less its "
        "margin, from the peaks measured at smaller sizes.</li>";
  }
  return out + "</ul></div>\n";
}

}  // namespace

namespace {

struct RenderedSections {
  std::string body;
  std::vector<std::string> schemas;
  std::vector<std::pair<const char*, const char*>> sections;  // anchor, name
  bool check = false, explain = false, fit = false;
};

// The cards of every document the page holds, shared by the page and the fragment.
RenderedSections renderSections(const nlohmann::json& page) {
  RenderedSections out;
  const ReadJson& check = member(page, "check");
  const ReadJson& explain = member(page, "explain");
  const ReadJson& fit = member(page, "fit");
  struct Document {
    const ReadJson& json;
    const char* key;
    const char* schema;
    const char* name;
    std::string (*render)(const ReadJson&);
  };
  const Document documents[] = {{check, "check", "memseal.check/1", "Leak check", checkSection},
                                {explain, "explain", "memseal.explain/1", "Peak", explainSection},
                                {fit, "fit", "memseal.fit/1", "Fit", fitSection}};
  for (const Document& document : documents) {
    if (document.json.is_null()) continue;
    if (!document.json.is_object()) {
      out.body += std::string("<div class=\"card warning\">The <code>") + document.key +
                  "</code> document is not a JSON object, so it is not shown.</div>";
      continue;
    }
    std::string schema = textAt(document.json, "schema");
    out.schemas.push_back(schema.empty() ? document.schema : schema);
    out.sections.emplace_back(document.key, document.name);
    out.body += schemaWarning(document.json, document.schema) + document.render(document.json);
  }
  if (out.sections.empty()) {
    out.body +=
        "<div class=\"card nothing\">No report to show: the page was given no leak check, "
        "peak explanation or fit.</div>";
  }
  out.check = check.is_object();
  out.explain = explain.is_object();
  out.fit = fit.is_object();
  return out;
}

// One selector list, each selector put under `scope`; the page's roots become the scope itself.
std::string scopeSelectors(const std::string& selectors, const std::string& scope) {
  std::string out;
  std::stringstream list(selectors);
  std::string selector;
  while (std::getline(list, selector, ',')) {
    std::size_t first = selector.find_first_not_of(" \n\t");
    std::size_t last = selector.find_last_not_of(" \n\t");
    if (first == std::string::npos) continue;
    selector = selector.substr(first, last - first + 1);
    if (!out.empty()) out += ",";
    if (selector == ":root" || selector == "html" || selector == "body") {
      out += scope;
    } else {
      out += scope + " " + selector;
    }
  }
  return out;
}

}  // namespace

std::string scopeCss(const std::string& css, const std::string& scope) {
  std::string out;
  std::size_t at = 0;
  while (at < css.size()) {
    std::size_t open = css.find('{', at);
    if (open == std::string::npos) break;
    // The block's end: its matching brace (an @media block holds rules of its own).
    std::size_t close = open + 1;
    int depth = 1;
    for (; close < css.size() && depth > 0; ++close) {
      if (css[close] == '{') ++depth;
      if (css[close] == '}') --depth;
    }
    std::string head = css.substr(at, open - at);
    std::string inside = css.substr(open + 1, close - open - 2);
    std::size_t first = head.find_first_not_of(" \n\t");
    head = first == std::string::npos ? "" : head.substr(first);
    if (head.rfind('@', 0) == 0) {
      out += head + "{" + scopeCss(inside, scope) + "}\n";
    } else if (!head.empty()) {
      out += scopeSelectors(head, scope) + "{" + inside + "}\n";
    }
    at = close;
  }
  return out;
}

std::string renderHtmlReport(const nlohmann::json& page, const std::string& title) {
  RenderedSections rendered = renderSections(page);
  std::string out = pageHead(title);
  out += "<body>\n" + pageHeader(title, rendered.schemas, rendered.sections);
  out += "<main class=\"wrap\">\n";
  if (!rendered.sections.empty()) out += howToRead(rendered.check, rendered.explain, rendered.fit);
  out += rendered.body + "\n</main>\n<footer>memseal</footer>\n<script>" + std::string(kScript) +
         "</script>\n</body>\n</html>\n";
  return out;
}

std::string renderHtmlFragment(const nlohmann::json& page, const std::string& title) {
  RenderedSections rendered = renderSections(page);
  // The page's style, every rule under the fragment's class, so that it neither changes the page
  // it is shown in (a notebook) nor depends on it. No script: a notebook may not run it, and the
  // cards need none.
  static const std::string style =
      scopeCss(kStyle, ".memseal-fragment") +
      ".memseal-fragment{padding:10px 16px 2px;border-radius:12px;max-width:1180px}\n"
      ".memseal-fragment .fragment-title{font-size:12px;font-weight:700;letter-spacing:.12em;"
      "text-transform:uppercase;color:var(--muted)}\n";
  std::string out = "<div class=\"memseal-fragment\">\n<style>" + style + "</style>\n";
  out += "<div class=\"fragment-title\">memseal";
  if (!title.empty()) out += " &#183; " + escapeHtml(title);
  out += "</div>\n" + rendered.body + "\n</div>\n";
  return out;
}

}  // namespace memseal::report
