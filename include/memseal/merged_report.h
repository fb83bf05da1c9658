// A distributed job's view: the reports of its ranks side by side. Each finding is matched across
// ranks by its cause (category, op and the first line of the program's own code that made it), so
// a leak every rank has is one finding ("all 4 ranks, +2.0 MiB/step each") and a leak of some
// ranks only is told as divergent ("rank 0 only"); ranks that never reported are listed as missing,
// with why where it is known.
//
//   std::vector<memseal::RankReport> ranks = ...;  // a report per rank, or why there is none
//   memseal::MergedReport merged = memseal::mergeRankReports(ranks);
//   std::cout << merged.toText();
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

// What `memseal explain` measured of a rank's step: its peak, and the role that held most of it.
struct RankPeak {
  std::int64_t peak_bytes = 0;
  std::uint32_t peak_step = 0;
  std::string top_role;  // "activations", ...; empty where none was named
  std::int64_t top_role_bytes = 0;
  std::vector<std::pair<std::string, std::int64_t>> roles;  // every role's bytes at the peak
};

// One rank as the merge reads it: its leak report, its explained peak, or neither and why (killed,
// never started tracking).
struct RankReport {
  RankIdentity identity;
  std::string source;                // where it came from: a file, or "pid N"
  std::optional<LeakReport> report;  // the leak check; empty where the rank left none
  std::optional<RankPeak> peak;      // memseal explain's peak of the rank's step
  std::string missing_reason;        // why, when it has neither
};

enum class RankStatus { kNoLeak, kLeak, kMissing, kExplained };
// "no_leak", "leak", "missing", "explained" (a peak explained, no leak check)
MEMSEAL_API const char* rankStatusId(RankStatus status);

struct RankSummary {
  RankIdentity identity;
  std::string source;
  RankStatus status = RankStatus::kMissing;
  std::uint32_t steps = 0;   // its report's steps, warm-up included
  std::uint32_t warmup = 0;  // of them, warm-up
  std::size_t findings = 0;
  // The most tracked tensor memory at a step boundary, and on CUDA the most reserved by the
  // caching allocator on any device; 0 where not seen.
  std::int64_t peak_live_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::optional<RankPeak> explained_peak;  // memseal explain's, where the rank has one
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
  // What holds it (Python's heap), as the lowest rank whose report names a holder says; and which.
  std::vector<std::string> holders;
  int holders_rank = -1;
  bool everyReportingRank = false;  // every rank that reported has it
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
// that numbering needs. A rank that reported twice keeps its first report, and a note says so.
MEMSEAL_API MergedReport mergeRankReports(const std::vector<RankReport>& ranks);

// Why `ranks` are not the ranks of one job: they name two or more run ids (torchrun's rendezvous
// id; reports that name none are of any job), listed with the reports of each; "" when they are
// one job. `memseal merge` and Python's merge() refuse such reports unless forced.
MEMSEAL_API std::string otherJobs(const std::vector<RankReport>& ranks);

// One rank's report from its JSON: a leak check (memseal.check/1) or an explained peak
// (memseal.explain/1), its rank from its own "rank" (none: world_size 0, the merge numbers it);
// `source` names it in the merge. Throws std::invalid_argument saying what is wrong.
MEMSEAL_API RankReport rankReportFromJson(const std::string& json, const std::string& source);

}  // namespace memseal
