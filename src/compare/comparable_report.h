// A report of any kind memseal writes, read into what two runs are compared by: the peak and its
// splits, the leak causes, the capacity, a timeline, and what tells programs apart. One reader per
// kind (check, explain, fit, merged); the diff itself is in report_diff.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memseal/diff.h"

namespace memseal::compare {

// A leak cause as two runs are matched by: category, op and the program's own first line.
struct Cause {
  std::string category;
  std::string op;
  std::string site;  // "file:line" as reports show it
  double bytes_per_step = 0;
  bool freed = false;
  std::vector<int> ranks;
  std::string holder;
  std::string hint;

  // The site by its file's name alone: a baseline made in one checkout matches a run in another.
  std::string key() const;
};

struct Split {
  std::string dimension;
  bool additive = true;
  std::vector<std::pair<std::string, std::int64_t>> parts;  // key, bytes (keys unique)
};

struct ComparableReport {
  std::string kind;  // "check", "explain", "fit", "merged"
  std::string schema;
  std::string peak_measure;
  std::int64_t peak = 0;
  std::int64_t noise = 0;  // the spread of the run's own measured steps
  std::uint32_t steps = 0;
  std::uint32_t warmup = 0;
  std::vector<Split> splits;
  std::vector<Cause> causes;
  std::optional<std::int64_t> largest_size;  // fit
  std::optional<std::int64_t> budget_bytes;  // fit
  std::string model;                         // fit
  std::vector<std::int64_t> sizes;           // fit: the sizes measured
  int world_size = 0;                        // merged
  // memseal run: how its steps were taken ("one step per call of aten::linear", "time windows of
  // 5ms"), from its steps_from; empty for a report of check or watch, where the program named its
  // steps.
  std::set<std::string> step_rules;
  std::string timeline_axis;
  std::vector<DiffPoint> timeline;
  // The names of the program's own source files the report names (its stacks, its Python lines),
  // without their folders: two runs of one program name some of the same, wherever it was checked
  // out.
  std::set<std::string> source_files;
};

// Reads a report memseal wrote; `label` names it in errors. Throws std::invalid_argument.
ComparableReport readComparable(const std::string& json, const std::string& label);

// The kind of report a schema name is ("check" for "memseal.check/1"), or "" for none memseal
// compares.
std::string kindOfSchema(const std::string& schema);

// At most `limit` points: each stretch's highest (a peak is never thinned away).
std::vector<DiffPoint> thinToHighest(const std::vector<DiffPoint>& points, std::size_t limit);

}  // namespace memseal::compare
