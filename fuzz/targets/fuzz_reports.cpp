// Any bytes as a memseal.check/1 report, and as one rank's report of a job (check or explain): a
// reader throws std::invalid_argument for what it cannot read and nothing else; what it read is
// written again (text, JSON) and read back, and merged with itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

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
  return 0;
}
