// Two reports of one program set side by side: what moved the peak (by role, module, line and op,
// largest change first, adding up to the whole change), which leak causes are new, gone or changed,
// and how far the size that fits moved. And the same comparison as a baseline a test or a CI job
// holds memory to.
//
//   memseal::ReportDiff diff = memseal::diffReports(before_json, after_json);
//   std::cout << diff.toText();                          // or toJson(): memseal.diff/1
//
//   memseal::BaselineCheck held = memseal::checkAgainstBaseline(baseline_json, report_json, 0.05);
//   if (!held.passed) std::cerr << held.summary << "\n" << held.diff.toText();
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "memseal/export.h"

namespace memseal {

// One key's share of the peak in both runs (a role, a module, a line of code, an op, a phase...).
struct DiffEntry {
  std::string key;
  std::int64_t before = 0;
  std::int64_t after = 0;
  std::int64_t change() const { return after - before; }
};

// One way of splitting what the reports measured, entries with the largest change first (those
// that name nothing, "(no module)", "(no line) OP" and "(rest)", after the others). Where
// `additive`, the entries are parts of the peak and their changes add up to the peak's change
// (what no listed key holds is one entry, "(rest)"); otherwise each entry is a peak of its own
// (the peak of a phase, of a rank, at a size).
struct DiffBreakdown {
  std::string dimension;  // "role", "module", "line", "op", "phase", "device", "rank" or "size"
  bool additive = true;
  std::vector<DiffEntry> entries;
};

// One leak cause (category, op, and the first line of the program's own code that made it) in
// either run.
struct CauseDiff {
  std::string change;  // "new", "gone", "grown", "shrunk" or "same"
  std::string category;
  std::string op;
  std::string site;  // "file:line", "" where the stack had none
  double before_bytes_per_step = 0;
  double after_bytes_per_step = 0;
  bool before_freed = false;  // held for a while and then freed, in that run
  bool after_freed = false;
  std::vector<int> before_ranks;  // a job of ranks: the ranks that have it
  std::vector<int> after_ranks;
  std::string holder;  // what keeps it in the newer run, where the report names it (Python)
  std::string hint;    // the cause and its fix, from the newer run (the older one for a gone cause)
};

// The largest size that fits a budget, before and after (memseal fit).
struct CapacityDiff {
  std::optional<std::int64_t> before_largest_size;
  std::optional<std::int64_t> after_largest_size;
  std::optional<std::int64_t> before_budget_bytes;
  std::optional<std::int64_t> after_budget_bytes;
  std::string before_model;
  std::string after_model;
};

struct DiffPoint {
  double x = 0;
  double bytes = 0;
};

struct MEMSEAL_API ReportDiff {
  std::string kind;  // "check", "explain", "fit" or "merged": both reports are of this kind
  std::string before_label, after_label;  // the files compared, or "before" and "after"
  std::string before_schema, after_schema;
  std::string peak_measure;  // what before_peak and after_peak are, in words
  std::int64_t before_peak = 0;
  std::int64_t after_peak = 0;
  // How far the peak of one run moves by itself: the larger spread of the two runs' own measured
  // steps. A peak change within it is no change.
  std::int64_t noise_bytes = 0;
  std::vector<DiffBreakdown> breakdowns;
  std::vector<CauseDiff> causes;  // new first, then grown, shrunk, gone, same
  std::optional<CapacityDiff> capacity;
  // Both runs on one axis: "step" (tracked bytes at each step boundary), "share of the step"
  // (live bytes over the peak step, 0 to 100), "size" (peak at each size) or "rank".
  std::string timeline_axis;
  std::vector<DiffPoint> before_timeline, after_timeline;  // at most 512 points each
  // What makes the comparison less than exact (other warm-up, other step counts, other sizes).
  std::vector<std::string> warnings;

  std::int64_t peakChange() const { return after_peak - before_peak; }
  // The peak moved by more than the noise.
  bool peakChanged() const;
  // The causes that are new in the newer run.
  std::size_t newCauses() const;
  // Nothing changed beyond the noise: the same peak, the same causes at about the same rates, the
  // same largest size.
  bool empty() const;
  std::string toText() const;
  // Schema "memseal.diff/1" (docs/diff-json.md), "schema" first.
  std::string toJson() const;
};

MEMSEAL_API extern const char* const kDiffReportSchema;  // "memseal.diff"
MEMSEAL_API extern const int kDiffReportVersion;         // 1

// Two reports that cannot be compared meaningfully: of two kinds, or of two programs.
class MEMSEAL_API DiffRefused : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct DiffOptions {
  std::string before_label = "before";
  std::string after_label = "after";
  // Compare reports that look like runs of two programs (no source file in common) anyway.
  bool force = false;
};

// Reads two reports memseal wrote (memseal.check/1, memseal.explain/1, memseal.fit/1 or /2,
// memseal.merged/1; any version it ever wrote) and compares them. Throws DiffRefused for two kinds,
// or two programs without `force`; std::invalid_argument naming the report for one it cannot read.
MEMSEAL_API ReportDiff diffReports(const std::string& before_json, const std::string& after_json,
                                   const DiffOptions& options = {});

// A report held to a baseline: it fails when its peak grows by more than `tolerance` (a fraction:
// 0.05 is 5%) and beyond the runs' noise, when a leak cause appears that the baseline did not
// have, or when the largest size that fits shrinks.
struct BaselineCheck {
  bool passed = true;
  std::vector<std::string> failures;  // why it failed, one sentence each
  // One line for a CI log: "memseal baseline: peak 12.0 MiB -> 12.4 MiB (+3.3%, tolerance 5%),
  // no new leak cause: ok".
  std::string summary;
  ReportDiff diff;
};

MEMSEAL_API BaselineCheck checkAgainstBaseline(const std::string& baseline_json,
                                               const std::string& report_json, double tolerance,
                                               const DiffOptions& options = {});

// "5%", "5 %", "0.05": the fraction; nullopt when not understood, negative, or 1000% or more.
MEMSEAL_API std::optional<double> parseTolerance(const std::string& text);

}  // namespace memseal
