// The fit section (memseal.fit/2; /1 reads the same, without phases or a search): peak against
// size, the model through the points (the highest of the phases' models), the prediction for the
// budget, where the phase holding the peak changes, and verification with its search.
#include "report/html/sections.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "explain/phase_names.h"
#include "report/html/html_text.h"
#include "report/html/svg_chart.h"
#include "report/html_report.h"

namespace memseal::report::html {

namespace {

using explain::phaseTitle;

struct Coefficients {
  double c0 = 0, c1 = 0, c2 = 0;
  double at(double size) const { return c0 + c1 * size + c2 * size * size; }
};

struct FitModel {
  enum class Kind { kNone, kLinear, kQuadratic, kPhases } kind = Kind::kNone;
  double c0 = 0, c1 = 0, c2 = 0;
  std::vector<Coefficients> phases;  // kPhases: the model is their highest
  double operator()(double size) const {
    if (kind != Kind::kPhases) return Coefficients{c0, c1, c2}.at(size);
    double highest = 0;
    for (std::size_t i = 0; i < phases.size(); ++i) {
      highest = i == 0 ? phases[i].at(size) : std::max(highest, phases[i].at(size));
    }
    return highest;
  }
};

FitModel fitModel(const ReadJson& fit) {
  FitModel model;
  std::string name = textAt(fit, "model");
  if (name == "phases") {
    for (const ReadJson& phase : arrayAt(fit, "phases")) {
      model.phases.push_back(
          {numberOr(phase, "c0", 0), numberOr(phase, "c1", 0), numberOr(phase, "c2", 0)});
    }
    if (!model.phases.empty()) model.kind = FitModel::Kind::kPhases;
    return model;
  }
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

// The fit's measured points, by size.
std::vector<Point> measuredPoints(const ReadJson& fit) {
  std::vector<Point> points;
  for (const ReadJson& point : arrayAt(fit, "points")) {
    std::optional<double> size = numberAt(point, "size");
    std::optional<double> bytes = numberAt(point, "peak_bytes");
    if (size && bytes) points.emplace_back(clampForChart(*size), clampForChart(*bytes));
  }
  std::sort(points.begin(), points.end());
  return points;
}

// The model through the measured sizes (solid) and beyond them up to `curve_end` (dashed), sampled
// densely enough for a quadratic to look smooth.
struct ModelCurves {
  std::vector<Point> measured, extrapolated;
};

ModelCurves modelCurves(const FitModel& model, const std::vector<Point>& points, double curve_end) {
  ModelCurves curves;
  if (model.kind == FitModel::Kind::kNone || points.empty()) return curves;
  double start = points.front().first;
  double max_size = points.back().first;
  constexpr int kSamples = 48;
  for (int i = 0; i <= kSamples; ++i) {
    double size = start + (max_size - start) * i / kSamples;
    curves.measured.emplace_back(size, clampForChart(model(size)));
  }
  if (curve_end > max_size) {
    for (int i = 0; i <= kSamples; ++i) {
      double size = max_size + (curve_end - max_size) * i / kSamples;
      curves.extrapolated.emplace_back(size, clampForChart(model(size)));
    }
  }
  return curves;
}

// The budget, and the budget less the margin, across the plot.
void drawBudget(std::string& svg, const Plot& plot, const Scale& y, double budget, double margin) {
  double at = y(budget);
  svg += "<g class=\"budget\"><title>budget " + bytesText(budget) + "</title>" +
         svgLine(plot.left, at, plot.right, at, "budget-line") +
         svgText(plot.left + 6, at - 6, "budget " + bytesText(budget), "budget-label") + "</g>";
  if (margin <= 0) return;
  double usable = budget * (1 - margin);
  double usable_at = y(usable);
  svg += "<g class=\"usable\"><title>budget less the " + ratioPercentText(margin) +
         " margin: " + bytesText(usable) + "</title>" +
         svgLine(plot.left, usable_at, plot.right, usable_at, "usable-line") +
         svgText(plot.left + 6, usable_at + 15,
                 "budget less " + ratioPercentText(margin) + " margin " + bytesText(usable),
                 "usable-label") +
         "</g>";
}

// The predicted largest size (a diamond on the curve, its size by the axis) and the verification
// run's measured peak (a square).
void drawPredictionAndVerification(std::string& svg, const ReadJson& fit, const Plot& plot,
                                   const Scale& x, const Scale& y) {
  std::optional<double> predicted_size = numberAt(fit, "predicted_max_size");
  std::optional<double> predicted_peak = numberAt(fit, "predicted_peak_bytes");
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
  const ReadJson& verify = member(fit, "verify");
  std::optional<double> verify_size = numberAt(verify, "size");
  std::optional<double> verify_measured = numberAt(verify, "measured_peak_bytes");
  if (verify_size && verify_measured) {
    double cx = x(*verify_size);
    double cy = y(*verify_measured);
    svg += "<g class=\"verify\"><title>verified at size " + countText(*verify_size) +
           ": measured " + bytesText(*verify_measured) + "</title>" +
           svgRect(cx - 6, cy - 6, 12, 12, "verify-mark") + "</g>";
  }
  // The sizes the search measured after a miss: hollow squares, filled where they fit.
  for (const ReadJson& searched : arrayAt(verify, "searched")) {
    std::optional<double> size = numberAt(searched, "size");
    std::optional<double> peak = numberAt(searched, "peak_bytes");
    if (!size || !peak || !textAt(searched, "error").empty()) continue;
    bool fits = flagAt(searched, "fits").value_or(false);
    double cx = x(clampForChart(*size));
    double cy = y(clampForChart(*peak));
    svg += std::string("<g class=\"verify searched\"><title>searched size ") + countText(*size) +
           ": measured " + bytesText(*peak) + (fits ? ", fits" : ", over") + "</title>" +
           svgRect(cx - 4, cy - 4, 8, 8, fits ? "verify-mark" : "verify-mark over") + "</g>";
  }
}

// Peak against size: the measured points, the model through them (solid where measured, dashed
// where extrapolated up to the predicted size), the budget and the share the margin leaves.
std::string fitChart(const ReadJson& fit) {
  constexpr int kWidth = 960;
  constexpr int kHeight = 380;
  const Plot plot{84, 24, kWidth - 30.0, kHeight - 48.0};
  std::string svg = svgOpen("fit-chart", kWidth, kHeight, "Peak bytes against size");
  std::vector<Point> points = measuredPoints(fit);
  std::optional<double> budget = numberAt(fit, "budget_bytes");
  if (points.empty() && !budget) {
    return svg + svgEmpty(plot, "no measured sizes in this report") + "</svg>";
  }
  std::optional<double> predicted_size = numberAt(fit, "predicted_max_size");
  std::optional<double> predicted_peak = numberAt(fit, "predicted_peak_bytes");
  const ReadJson& verify = member(fit, "verify");
  std::optional<double> verify_size = numberAt(verify, "size");
  std::optional<double> verify_measured = numberAt(verify, "measured_peak_bytes");

  double curve_end = points.empty() ? 1 : points.back().first;
  if (predicted_size) curve_end = std::max(curve_end, clampForChart(*predicted_size));
  ModelCurves curves = modelCurves(fitModel(fit), points, curve_end);
  double x_hi = curve_end;
  if (verify_size) x_hi = std::max(x_hi, clampForChart(*verify_size));
  for (const ReadJson& searched : arrayAt(verify, "searched")) {
    if (std::optional<double> size = numberAt(searched, "size")) {
      x_hi = std::max(x_hi, clampForChart(*size));
    }
  }
  double y_hi = 0;
  for (const auto* series : {&points, &curves.measured, &curves.extrapolated}) {
    for (const Point& point : *series) y_hi = std::max(y_hi, point.second);
  }
  for (const std::optional<double>& value : {budget, predicted_peak, verify_measured}) {
    if (value) y_hi = std::max(y_hi, clampForChart(*value));
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
    drawBudget(svg, plot, y, *budget, std::clamp(numberOr(fit, "margin", 0), 0.0, 1.0));
  }
  if (!curves.measured.empty()) svg += polyline(curves.measured, x, y, "model");
  if (!curves.extrapolated.empty())
    svg += polyline(curves.extrapolated, x, y, "model extrapolated");
  for (const Point& point : points) {
    svg += "<circle class=\"point\" cx=\"" + px(x(point.first)) + "\" cy=\"" + px(y(point.second)) +
           "\" r=\"5\"><title>size " + countText(point.first) + ": peak " +
           bytesText(point.second) + "</title></circle>";
  }
  drawPredictionAndVerification(svg, fit, plot, x, y);
  return svg + "</svg>";
}

// The tiles above the chart: the model, the largest size that fits, the budget, the verification.
std::string fitTiles(const ReadJson& fit) {
  std::string out = "<div class=\"tiles\">";
  std::string model = textAt(fit, "model");
  std::optional<bool> is_linear = flagAt(fit, "is_linear");
  std::string model_note;
  if (is_linear) model_note = *is_linear ? "peak grows linearly" : "peak is not linear in size";
  if (std::optional<double> tolerance = numberAt(fit, "tolerance")) {
    model_note +=
        (model_note.empty() ? "" : ", ") + std::string("tolerance ") + ratioPercentText(tolerance);
  }
  out += tile("model", model.empty() ? kDash : escapeHtml(model), model_note);
  std::string refusal = textAt(fit, "refusal");
  const ReadJson& verify = member(fit, "verify");
  std::optional<double> measured_size = numberAt(verify, "measured_max_size");
  if (flagAt(fit, "largest_size_measured").value_or(false) && measured_size) {
    out += tile("largest size that fits", countText(*measured_size),
                "measured (peak " + bytesText(numberAt(verify, "measured_max_peak_bytes")) +
                    "); the model said " + countText(numberAt(fit, "predicted_max_size")));
  } else if (std::optional<double> predicted_size = numberAt(fit, "predicted_max_size")) {
    std::string note = "predicted peak " + bytesText(numberAt(fit, "predicted_peak_bytes"));
    std::string limiting = textAt(fit, "limiting_phase");
    if (!limiting.empty()) note += ", in " + escapeHtml(phaseTitle(limiting));
    std::optional<double> extrapolation = numberAt(fit, "extrapolation");
    if (extrapolation && *extrapolation > 1 && !verify.is_object()) {
      char times[32];
      std::snprintf(times, sizeof(times), "%.1fx", *extrapolation);
      note += std::string("; ") + times + " the largest measured size, not verified";
    }
    out += tile("largest size that fits", countText(*predicted_size), note);
  } else {
    out += tile("largest size that fits", "none",
                refusal.empty() ? "no prediction" : richText(refusal));
  }
  std::string budget_note = escapeHtml(textAt(fit, "budget_source"));
  if (std::optional<double> margin = numberAt(fit, "margin")) {
    budget_note += (budget_note.empty() ? "" : ", ") + ratioPercentText(margin) + " kept free";
  }
  out += tile("budget", bytesText(numberAt(fit, "budget_bytes")), budget_note);
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
  return out + "</div>";
}

// The measured sizes against the model, and the models' formulas.
std::string fitPointsCard(const ReadJson& fit) {
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
  std::string out = "<div class=\"card\"><h3>Measured sizes and the model</h3>";
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
  return out + "</div>";
}

// Where the phase holding the peak changes, and the models of the phases that hold it somewhere
// or are a whole pass (forward's other ops and backward's other nodes are counted, not listed).
std::string fitPhasesCard(const ReadJson& fit) {
  const ReadJson& phases = arrayAt(fit, "phases");
  if (phases.empty()) return "";
  std::vector<std::string> limiting{textAt(fit, "limiting_phase")};
  std::string changes;
  for (const ReadJson& change : arrayAt(fit, "phase_changes")) {
    std::string phase = textAt(change, "phase");
    limiting.push_back(phase);
    changes += std::string(changes.empty() ? "in " : ", then in ") + escapeHtml(phaseTitle(phase)) +
               (changes.empty() ? " at size " : " from size ") +
               countText(numberAt(change, "size"));
  }
  std::string rows;
  int hidden = 0;
  for (const ReadJson& phase : phases) {
    std::string name = textAt(phase, "phase");
    if (!explain::listedPhase(name, limiting)) {
      ++hidden;
      continue;
    }
    rows += "<tr><td>" + escapeHtml(phaseTitle(name)) + "</td><td>" +
            escapeHtml(textAt(phase, "model")) + "</td>" +
            numCell(bytesText(numberAt(phase, "c0"))) + numCell(bytesText(numberAt(phase, "c1"))) +
            numCell(ratioPercentText(numberAt(phase, "max_relative_residual"))) + "</tr>";
  }
  std::string out = "<div class=\"card\"><h3>Phases</h3>";
  if (!changes.empty()) out += "<p>Predicted, the peak is " + changes + ".</p>";
  out +=
      "<div class=\"table-wrap\"><table class=\"fit-phases compact\"><thead><tr><th>phase</th>"
      "<th>model</th><th class=\"num\">at size 0</th><th class=\"num\">per unit</th><th "
      "class=\"num\">residual</th></tr></thead><tbody>" +
      rows + "</tbody></table></div>";
  if (hidden > 0) {
    out += "<p>" +
           muted(std::to_string(hidden) +
                 " more phases (forward's ops, backward's nodes) never hold the peak "
                 "between the smallest measured size and the predicted one.") +
           "</p>";
  }
  return out + "</div>";
}

}  // namespace

std::string fitSection(const ReadJson& fit) {
  std::string out = "<section id=\"fit\"><h2>How far the size can grow</h2>" + fitTiles(fit);
  std::string refusal = textAt(fit, "refusal");
  if (!numberAt(fit, "predicted_max_size") && !refusal.empty()) {
    out += "<div class=\"card refusal\"><strong>No prediction:</strong> " + richText(refusal) +
           "</div>";
  }
  out += "<div class=\"card\"><h3>Peak against size</h3>" + fitChart(fit) +
         legend({{"point", "measured peak"},
                 {"model", "fitted model (dashed: extrapolated)"},
                 {"budget", "budget"},
                 {"dashed usable", "budget less the margin"},
                 {"prediction", "largest size predicted to fit"},
                 {"verify", "verification run (small: sizes searched after a miss)"}}) +
         "</div>";
  return out + fitPhasesCard(fit) + fitPointsCard(fit) + "</section>";
}

}  // namespace memseal::report::html
