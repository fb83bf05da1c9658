// A report held to a baseline (memseal/diff.h): the peak within a tolerance and the runs' noise,
// no new leak cause, no smaller capacity; one line for a CI log.
#include <cmath>
#include <string>

#include "common/text.h"
#include "memseal/diff.h"

namespace memseal {

namespace {

std::string tolerancePercent(double fraction) {
  double percent = fraction * 100;
  return common::fixedText(percent, std::fabs(percent) < 10 ? 1 : 0) + "%";
}

std::string signedPercent(double fraction) {
  return (fraction >= 0 ? "+" : "") + tolerancePercent(fraction);
}

std::string causeText(const CauseDiff& cause) {
  std::string out = cause.category + " (" + cause.op;
  if (!cause.site.empty()) out += " at " + cause.site;
  return out + ")";
}

}  // namespace

BaselineCheck checkAgainstBaseline(const std::string& baseline_json, const std::string& report_json,
                                   double tolerance, const DiffOptions& options) {
  BaselineCheck held;
  held.diff = diffReports(baseline_json, report_json, options);
  const ReportDiff& diff = held.diff;
  double before = static_cast<double>(diff.before_peak);
  double growth = before > 0 ? diff.peakChange() / before : (diff.peakChange() > 0 ? 1.0 : 0.0);
  if (diff.peakChange() > diff.noise_bytes && growth > tolerance) {
    held.failures.push_back("the peak grew from " + common::bytesText(diff.before_peak) + " to " +
                            common::bytesText(diff.after_peak) + " (" + signedPercent(growth) +
                            ", more than the " + tolerancePercent(tolerance) + " tolerance)");
  }
  for (const CauseDiff& cause : diff.causes) {
    if (cause.change == "new") {
      held.failures.push_back("a leak cause the baseline did not have: " + causeText(cause));
    }
  }
  if (diff.capacity && diff.capacity->before_largest_size && diff.capacity->after_largest_size &&
      *diff.capacity->after_largest_size < *diff.capacity->before_largest_size) {
    held.failures.push_back("the largest size that fits fell from " +
                            std::to_string(*diff.capacity->before_largest_size) + " to " +
                            std::to_string(*diff.capacity->after_largest_size));
  }
  held.passed = held.failures.empty();
  std::size_t new_causes = diff.newCauses();
  held.summary = "memseal baseline: peak " + common::bytesText(diff.before_peak) + " -> " +
                 common::bytesText(diff.after_peak) + " (" + signedPercent(growth) +
                 ", tolerance " + tolerancePercent(tolerance) + "), " +
                 (new_causes == 0 ? std::string("no new leak cause")
                                  : common::countedText(new_causes, "new leak cause")) +
                 (held.passed ? ": ok" : ": FAILED");
  return held;
}

}  // namespace memseal
