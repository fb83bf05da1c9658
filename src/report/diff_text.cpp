// The text of a comparison of two reports (ReportDiff::toText): the peak's change and what moved
// it, dimension by dimension, the leak causes, the capacity, and what makes it less than exact.
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "memseal/diff.h"
#include "report/text_format.h"

namespace memseal {

namespace {

using report::padded;

// Entries shown per dimension; the rest are one line, so the lines still add up.
constexpr std::size_t kShownEntries = 8;

std::string signedBytes(std::int64_t bytes) {
  if (bytes == 0) return "0 B";
  return (bytes > 0 ? "+" : "-") + common::bytesText(std::llabs(bytes));
}

std::string signedRate(double bytes) {
  return (bytes >= 0 ? "+" : "-") + common::bytesTextFromDouble(std::fabs(bytes)) + "/step";
}

std::string relativeText(std::int64_t before, std::int64_t change) {
  if (before <= 0) return "";
  double percent = 100.0 * static_cast<double>(change) / static_cast<double>(before);
  if (std::fabs(percent) < 0.05) return change == 0 ? ", +0.0%" : ", within 0.1%";
  return ", " + std::string(percent >= 0 ? "+" : "") +
         common::fixedText(percent, std::fabs(percent) < 10 ? 1 : 0) + "%";
}

void writeBreakdown(std::ostringstream& out, const DiffBreakdown& breakdown) {
  if (breakdown.entries.empty()) return;
  out << "\n"
      << padded((breakdown.additive ? "by " : "peak per ") + breakdown.dimension, 44)
      << padded("before", 12) << padded("after", 12) << "change\n";
  std::size_t shown = 0;
  std::int64_t rest_before = 0, rest_after = 0;
  std::size_t rest = 0;
  for (const DiffEntry& entry : breakdown.entries) {
    if (shown == kShownEntries && breakdown.additive) {
      rest_before += entry.before;
      rest_after += entry.after;
      ++rest;
      continue;
    }
    ++shown;
    std::string key =
        entry.key.size() > 41 ? "..." + entry.key.substr(entry.key.size() - 38) : entry.key;
    out << "  " << padded(key, 42) << padded(common::bytesText(entry.before), 12)
        << padded(common::bytesText(entry.after), 12) << signedBytes(entry.change()) << "\n";
  }
  if (rest > 0) {
    out << "  " << padded("(" + std::to_string(rest) + " more)", 42)
        << padded(common::bytesText(rest_before), 12) << padded(common::bytesText(rest_after), 12)
        << signedBytes(rest_after - rest_before) << "\n";
  }
}

std::string causeChangeLine(const CauseDiff& cause) {
  std::string line = padded(cause.change, 8) + cause.category + "  " + cause.op;
  if (!cause.site.empty()) line += " at " + cause.site;
  if (cause.change == "gone") {
    line += "  (was " + signedRate(cause.before_bytes_per_step) + ")";
  } else if (cause.change == "new") {
    line += "  " + signedRate(cause.after_bytes_per_step);
  } else {
    line += "  " + signedRate(cause.before_bytes_per_step) + " -> " +
            signedRate(cause.after_bytes_per_step);
  }
  if (cause.after_freed && cause.change != "gone") line += ", held then freed";
  return line;
}

void writeCauses(std::ostringstream& out, const ReportDiff& diff) {
  if (diff.causes.empty()) {
    if (diff.kind == "check" || diff.kind == "merged") out << "\nleak causes: none in either run\n";
    return;
  }
  out << "\nleak causes\n";
  for (const CauseDiff& cause : diff.causes) {
    out << "  " << causeChangeLine(cause) << "\n";
    if (!cause.holder.empty()) out << "          kept by " << cause.holder << "\n";
    if (!cause.after_ranks.empty() && cause.after_ranks != cause.before_ranks) {
      out << "          ranks " << cause.before_ranks.size() << " -> " << cause.after_ranks.size()
          << "\n";
    }
    if (cause.change == "new" && !cause.hint.empty()) {
      out << "          fix " << report::wrap(cause.hint, 86, "              ") << "\n";
    }
  }
}

std::string sizeText(const std::optional<std::int64_t>& size) {
  return size ? std::to_string(*size) : std::string("none");
}

}  // namespace

std::string ReportDiff::toText() const {
  std::ostringstream out;
  out << "memseal diff (" << kind << "): " << before_label << " -> " << after_label << "\n";
  out << "peak    " << common::bytesText(before_peak) << " -> " << common::bytesText(after_peak)
      << "  (" << signedBytes(peakChange()) << relativeText(before_peak, peakChange()) << ")  "
      << peak_measure << "; noise " << common::bytesText(noise_bytes) << "\n";
  if (empty()) {
    out << "no change beyond the noise: the same peak, the same leak causes\n";
  }
  for (const DiffBreakdown& breakdown : breakdowns) writeBreakdown(out, breakdown);
  writeCauses(out, *this);
  if (capacity) {
    out << "\nlargest size that fits: " << sizeText(capacity->before_largest_size) << " -> "
        << sizeText(capacity->after_largest_size);
    if (capacity->after_budget_bytes) {
      out << " (budget " << common::bytesText(*capacity->after_budget_bytes) << ")";
    }
    out << "\n";
  }
  if (!warnings.empty()) {
    out << "\nnote\n";
    for (const std::string& warning : warnings) {
      out << "  " << report::wrap(warning, 96, "  ") << "\n";
    }
  }
  return out.str();
}

}  // namespace memseal
