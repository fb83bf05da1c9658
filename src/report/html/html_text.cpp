#include "report/html/html_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/text.h"
#include "report/html_report.h"

namespace memseal::report::html {

using common::baseName;

std::string bytesText(double bytes) {
  return std::isfinite(bytes) ? common::bytesTextFromDouble(bytes) : kDash;
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
                 const std::string& note_html) {
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
  std::string op = common::shownOpName(textAt(site, "op"));
  std::string outer = common::shownOpName(textAt(site, "outer_op"));
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
std::string tensorHtml(const ReadJson& tensor, const ReadJson& shapes) {
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

}  // namespace memseal::report::html
