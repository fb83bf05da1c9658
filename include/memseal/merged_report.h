// A distributed job's view: the reports of its ranks side by side. Each finding is matched across
// ranks by its cause (category, op and the first line of the program's own code that made it), so
// a leak every rank has is one finding ("all 4 ranks, +2.0 MiB/step each") and a leak of some
// ranks only is told as divergent ("rank 0 only"); ranks that never reported are listed as missing,
// with why where it is known.
//
//   std::vector<memseal::RankReport> ranks = ...;   // one per rank: its report, or why there is
//   none memseal::MergedReport merged = memseal::mergeRankReports(ranks); std::cout <<
//   merged.toText();
//
// Linear in ranks x findings: a job of thousands of ranks merges in one pass.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memseal/export.h"
#include "memseal/leak_detector.h"

namespace memseal {

// One rank as the merge reads it: its report, or none and why (killed, never started tracking).
struct RankReport {
  RankIdentity identity;
  std::string source;                // where it came from: a file, or "pid N"
  std::optional<LeakReport> report;  // empty: the rank left no report
  std::string missing_reason;        // why, when known
};

enum class RankStatus { kNoLeak, kLeak, kMissing };
MEMSEAL_API const char* rankStatusId(RankStatus status);  // "no_leak", "leak", "missing"

struct RankSummary {
  RankIdentity identity;
  std::string source;
  RankStatus status = RankStatus::kMissing;
  std::uint32_t steps = 0;
  std::size_t findings = 0;
  // The most tracked tensor memory at a step boundary, and on CUDA the most reserved by the
  // caching allocator on any device; 0 where not seen.
  std::int64_t peak_live_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::string missing_reason;
};

// One cause across ranks.
struct MergedFinding {
  LeakCategory category = LeakCategory::kTensorsRetained;
  std::string op;    // the op that made it
  std::string site;  // the first line of the program's own code, "file:line"; empty where unknown
  std::vector<int> ranks;              // the ranks that have it, ascending
  std::vector<double> bytes_per_step;  // by rank, in the order of `ranks`
  LeakFinding example;                 // the lowest rank's finding
  bool everyReportingRank = false;     // every rank that reported has it
};

struct MergedReport {
  int world_size = 0;
  std::vector<RankSummary> ranks;       // by rank, 0 .. world_size - 1, missing ones included
  std::vector<MergedFinding> findings;  // every rank's first, then by ranks, then by bytes
  std::vector<std::string> notes;       // what the merge itself saw (duplicate ranks, ...)

  bool leak() const { return !findings.empty(); }
  MEMSEAL_API std::string toText() const;
  // Schema "memseal.merged/1" (docs/merged-json.md), "schema" first.
  MEMSEAL_API std::string toJson() const;
};

MEMSEAL_API extern const char* const kMergedReportSchema;  // "memseal.merged"
MEMSEAL_API extern const int kMergedReportVersion;         // 1

// The job's view of its ranks' reports. Reports without a rank identity (world_size 0) take the
// lowest ranks no report names; the world size is the largest any report names, or as many as
// that numbering needs. A rank that reported
// twice keeps its first report, and a note says so.
MEMSEAL_API MergedReport mergeRankReports(const std::vector<RankReport>& ranks);

}  // namespace memseal
