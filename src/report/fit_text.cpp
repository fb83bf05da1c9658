// FitReport for people: each size's peak (and its phases' peaks), the models, where the phase
// holding the peak changes, the prediction and how far it extrapolates, and what verification
// measured, the search included.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "explain/phase_names.h"
#include "memseal/fit.h"
#include "report/text_format.h"

namespace memseal {

namespace {

using explain::phaseTitle;
using report::bytesText;

std::string roundedBytes(double bytes) {
  return bytesText(static_cast<std::int64_t>(std::llround(bytes)));
}

std::string modelText(const std::string& model, double c0, double c1, double c2) {
  std::string text = roundedBytes(c0) + " + " + roundedBytes(c1) + " per unit";
  if (model == "quadratic") text += " + " + roundedBytes(c2) + " per unit squared";
  return text;
}

// The phases that limit the peak somewhere between the smallest measured size and the predicted.
std::vector<std::string> limitingPhases(const FitReport& report) {
  std::vector<std::string> limiting{report.limiting_phase};
  for (const PhaseChange& change : report.phase_changes) limiting.push_back(change.phase);
  return limiting;
}

void writePoints(std::ostringstream& out, const FitReport& report) {
  if (report.memory == "host") {
    out << "memseal: peak tensor memory by size\n";
  } else {
    out << "memseal: reserved peak of " << report.memory
        << " by size (the caching allocator's segments: blocks, rounding and splits)\n";
  }
  for (const FitPoint& point : report.points) {
    out << "  size " << report::padded(std::to_string(point.size), 8)
        << bytesText(point.peak_bytes);
    if (std::optional<double> fitted = report.predictPeak(point.size)) {
      out << "  (model " << roundedBytes(*fitted) << ")";
    }
    const char* separator = "  ";
    for (const PhasePeak& phase : explain::coarsePhases(point.phases)) {
      out << separator << phase.phase << " " << bytesText(phase.peak_bytes);
      separator = ", ";
    }
    out << "\n";
  }
}

void writeModels(std::ostringstream& out, const FitReport& report) {
  char line[240];
  std::snprintf(line, sizeof(line),
                "linear fit: %s, worst residual %.1f%%, largest size predicted from the others "
                "within %.1f%%",
                modelText("linear", report.linear_intercept, report.linear_slope, 0).c_str(),
                100 * report.linear_max_residual, 100 * report.linear_holdout_error);
  out << line << (report.is_linear ? " (linear)" : " (not linear)") << "\n";
  if (report.has_quadratic) {
    std::snprintf(line, sizeof(line),
                  "quadratic fit: worst residual %.1f%%, largest size predicted within %.1f%%",
                  100 * report.quadratic_max_residual, 100 * report.quadratic_holdout_error);
    out << line << "\n";
  }
  std::size_t node_phases = 0;
  const std::vector<std::string> limiting = limitingPhases(report);
  for (const PhaseModel& phase : report.phases) {
    if (!explain::listedPhase(phase.phase, limiting)) {
      ++node_phases;
      continue;
    }
    out << "  phase " << report::padded(phaseTitle(phase.phase), 9) << phase.model;
    if (phase.model != "none") out << ": " << modelText(phase.model, phase.c0, phase.c1, phase.c2);
    std::snprintf(line, sizeof(line), " (worst residual %.1f%%, holdout %.1f%%)",
                  100 * phase.max_residual, 100 * phase.holdout_error);
    out << line << "\n";
  }
  if (node_phases > 0) {
    out << "  (and " << node_phases << " more phases: forward's ops and backward's nodes)\n";
  }
  out << "model: " << report.model;
  if (report.model == "phases") out << " (the highest of the phases' models)";
  out << "\n";
  if (report.phase_changes.size() > 1) {
    out << "the peak is in";
    for (std::size_t i = 0; i < report.phase_changes.size(); ++i) {
      const PhaseChange& change = report.phase_changes[i];
      out << (i == 0 ? " " : ", then in ") << phaseTitle(change.phase)
          << (i == 0 ? " at size " : " from size ") << change.size;
    }
    out << "\n";
  }
}

void writePrediction(std::ostringstream& out, const FitReport& report) {
  if (report.budget_bytes) {
    out << "budget: " << bytesText(*report.budget_bytes) << " (" << report.budget_source << "), "
        << static_cast<int>(std::lround(report.margin * 100)) << "% kept free\n";
  }
  if (!report.predicted_max_size) {
    out << "no prediction: " << report.refusal << "\n";
    return;
  }
  out << "largest size that fits: " << *report.predicted_max_size << " (predicted peak "
      << bytesText(*report.predicted_peak_bytes);
  if (!report.limiting_phase.empty()) out << ", in " << phaseTitle(report.limiting_phase);
  out << ")";
  if (report.verification && report.verification->missed &&
      report.verification->measured_max_size) {
    out << ": the model's answer; measured below";
  }
  out << "\n";
  if (report.extrapolation > 1 && !report.verification) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "extrapolated: %.1fx the largest measured size (%lld); --verify measures it\n",
                  report.extrapolation, static_cast<long long>(report.points.back().size));
    out << line;
  }
}

void writeSearch(std::ostringstream& out, const FitReport::Verification& verification) {
  out << "  searched " << verification.searched.size() << " sizes:";
  for (const FitReport::Measurement& measured : verification.searched) {
    out << " " << measured.size << " ";
    if (!measured.error.empty()) {
      out << "failed";
    } else {
      out << (measured.fits ? "fits" : "over") << " (" << bytesText(measured.peak_bytes) << ")";
    }
    out << ";";
  }
  out << "\n";
  if (!verification.measured_max_size) {
    out << "  no size measured fits the budget less its margin\n";
    return;
  }
  out << "largest size that fits: " << *verification.measured_max_size << " (measured peak "
      << bytesText(*verification.measured_max_peak_bytes) << ", measured";
  if (verification.smallest_failing_size) {
    out << "; " << *verification.smallest_failing_size << " does not fit";
  } else {
    out << "; the search stopped before a size failed";
  }
  char line[120];
  std::snprintf(line, sizeof(line), "); the model's answer was %+.0f%% off\n",
                100 * verification.model_miss.value_or(0));
  out << line;
}

void writeVerification(std::ostringstream& out, const FitReport& report) {
  if (!report.verification) return;
  const FitReport::Verification& verification = *report.verification;
  if (!verification.error.empty()) {
    out << "verify: size " << verification.size << " failed: " << verification.error << "\n";
  } else {
    char line[32];
    std::snprintf(line, sizeof(line), "%+.1f%%", 100 * verification.relative_error);
    out << "verify: size " << verification.size << " measured "
        << bytesText(verification.measured_peak_bytes) << ", predicted "
        << bytesText(verification.predicted_peak_bytes) << " (" << line << "), "
        << (verification.within_budget ? "within" : "OVER") << " the budget"
        << (verification.missed ? ": the prediction missed" : "") << "\n";
  }
  if (verification.missed) writeSearch(out, verification);
}

}  // namespace

std::string FitReport::toText() const {
  std::ostringstream out;
  writePoints(out, *this);
  writeModels(out, *this);
  writePrediction(out, *this);
  writeVerification(out, *this);
  return out.str();
}

}  // namespace memseal
