// Any bytes as a memseal.check/1 report, as one rank's report of a job (check or explain), and as
// a report `memseal diff` compares (any kind): a reader throws std::invalid_argument for what it
// cannot read and nothing else; what it read is written again (text, JSON) and read back, merged
// with itself, and compared with itself (which must be an empty diff) and held to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "memseal/diff.h"
#include "memseal/merged_report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    memseal::LeakReport report = memseal::LeakReport::fromJson(text);
    report.toText();
    memseal::LeakReport again = memseal::LeakReport::fromJson(report.toJson());
    if (again.leak != report.leak || again.findings.size() != report.findings.size()) std::abort();
  } catch (const std::invalid_argument&) {
  }
  try {
    memseal::RankReport rank = memseal::rankReportFromJson(text, "fuzz");
    memseal::MergedReport merged = memseal::mergeRankReports({rank, rank});
    merged.toText();
    merged.toJson();
  } catch (const std::invalid_argument&) {
  }
  try {
    memseal::ReportDiff same = memseal::diffReports(text, text);
    same.toText();
    same.toJson();
    if (!same.empty() || same.peakChange() != 0) std::abort();
    if (!memseal::checkAgainstBaseline(text, text, 0.0).passed) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
