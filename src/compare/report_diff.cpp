// Two reports of one kind compared (memseal/diff.h): refused when they are of two kinds or look
// like two programs; otherwise each split of the peak key by key, the leak causes by cause, the
// capacity, and both timelines. Also the baseline check built on it.
#include "memseal/diff.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "common/schemas.h"
#include "common/text.h"
#include "compare/comparable_report.h"

namespace memseal {

const char* const kDiffReportSchema = common::kDiffSchema.name;
const int kDiffReportVersion = common::kDiffSchema.version;

namespace {

using compare::Cause;
using compare::ComparableReport;
using compare::Split;

// A rate is "the same" within this factor: two runs of a leak measure its rate a little apart.
constexpr double kSameRateFactor = 1.25;

std::string kindInWords(const std::string& kind) {
  if (kind == "check") return "a leak check";
  if (kind == "explain") return "an explained peak";
  if (kind == "fit") return "a fit";
  return "a job of ranks";
}

std::string someFiles(const std::set<std::string>& files) {
  std::string out;
  std::size_t shown = 0;
  for (const std::string& file : files) {
    if (shown++ == 3) return out + ", ...";
    out += (out.empty() ? "" : ", ") + file;
  }
  return out;
}

void refuseMismatch(const ComparableReport& a, const ComparableReport& b,
                    const DiffOptions& options, ReportDiff& diff) {
  if (a.kind != b.kind) {
    throw DiffRefused(options.before_label + " is " + kindInWords(a.kind) + " (" + a.schema +
                      ") and " + options.after_label + " " + kindInWords(b.kind) + " (" + b.schema +
                      "): memseal diff compares two reports of one kind");
  }
  bool shared = a.source_files.empty() || b.source_files.empty();
  for (const std::string& file : a.source_files) shared = shared || b.source_files.count(file);
  if (shared) return;
  std::string why = "the two reports name no source file in common (" + options.before_label +
                    ": " + someFiles(a.source_files) + "; " + options.after_label + ": " +
                    someFiles(b.source_files) + "): they look like runs of two programs";
  if (!options.force) throw DiffRefused(why + "; --force (force=True) compares them anyway");
  diff.warnings.push_back(why + ", compared as asked");
}

void warnAboutSteps(const ComparableReport& a, const ComparableReport& b, ReportDiff& diff) {
  if (a.warmup != b.warmup) {
    diff.warnings.push_back("warm-up differs (" + std::to_string(a.warmup) + " and " +
                            std::to_string(b.warmup) +
                            " steps): what one run counts as warm-up the other measures");
  }
  // Runs of one program under `memseal run` take a few steps more or fewer (steps follow time).
  if (a.kind == "check" &&
      std::max(a.steps, b.steps) > std::min(a.steps, b.steps) * kSameRateFactor) {
    diff.warnings.push_back("the runs have " + std::to_string(a.steps) + " and " +
                            std::to_string(b.steps) +
                            " steps: aligned by step number, a longer run has more time to grow");
  }
  if (!a.step_rules.empty() && !b.step_rules.empty() && a.step_rules != b.step_rules) {
    auto rules = [](const std::set<std::string>& set) {
      std::string out;
      for (const std::string& rule : set) out += (out.empty() ? "" : "; ") + rule;
      return out;
    };
    diff.warnings.push_back("the runs took their steps differently (" + rules(a.step_rules) +
                            ", then " + rules(b.step_rules) +
                            "): a step of one is not the same work as a step of the other");
  }
  if (a.kind == "explain" && a.steps != b.steps) {
    diff.warnings.push_back("the peaks are the highest of " + std::to_string(a.steps - a.warmup) +
                            " and " + std::to_string(b.steps - b.warmup) + " measured steps");
  }
  if (a.kind == "fit" && a.sizes != b.sizes) {
    diff.warnings.push_back(
        "the fits measured other sizes; the peak compared is at the largest "
        "size both measured");
  }
  if (a.kind == "merged" && a.world_size != b.world_size) {
    diff.warnings.push_back("the jobs had " + std::to_string(a.world_size) + " and " +
                            std::to_string(b.world_size) + " ranks");
  }
}

DiffBreakdown compareSplits(const Split* a, const Split* b) {
  DiffBreakdown out;
  out.dimension = a != nullptr ? a->dimension : b->dimension;
  out.additive = a != nullptr ? a->additive : b->additive;
  std::unordered_map<std::string, std::size_t> index;
  auto add = [&](const Split* split, bool after) {
    if (split == nullptr) return;
    for (const auto& [key, bytes] : split->parts) {
      auto [at, inserted] = index.emplace(key, out.entries.size());
      if (inserted) out.entries.push_back({key, 0, 0});
      (after ? out.entries[at->second].after : out.entries[at->second].before) += bytes;
    }
  };
  add(a, false);
  add(b, true);
  if (out.additive) {
    // Unchanged parts say nothing; the changed ones still add up to the peak's change.
    out.entries.erase(std::remove_if(out.entries.begin(), out.entries.end(),
                                     [](const DiffEntry& entry) { return entry.change() == 0; }),
                      out.entries.end());
    // What no module, line or listed key holds ("(no module)", "(rest)") comes after the parts
    // that name something, so the first line of a split is the largest thing that changed.
    auto unnamed = [](const DiffEntry& entry) { return !entry.key.empty() && entry.key[0] == '('; };
    std::stable_sort(out.entries.begin(), out.entries.end(),
                     [&](const DiffEntry& x, const DiffEntry& y) {
                       if (unnamed(x) != unnamed(y)) return unnamed(y);
                       return std::llabs(x.change()) > std::llabs(y.change());
                     });
  }
  return out;
}

const Split* findSplit(const ComparableReport& report, const std::string& dimension) {
  for (const Split& split : report.splits) {
    if (split.dimension == dimension) return &split;
  }
  return nullptr;
}

void compareBreakdowns(const ComparableReport& a, const ComparableReport& b, ReportDiff& diff) {
  std::vector<std::string> dimensions;
  for (const ComparableReport* report : {&a, &b}) {
    for (const Split& split : report->splits) {
      if (std::find(dimensions.begin(), dimensions.end(), split.dimension) == dimensions.end()) {
        dimensions.push_back(split.dimension);
      }
    }
  }
  for (const std::string& dimension : dimensions) {
    diff.breakdowns.push_back(compareSplits(findSplit(a, dimension), findSplit(b, dimension)));
  }
}

// One entry per cause: two findings of one cause in one report (two parts) are added up.
std::map<std::string, Cause> causesByKey(const std::vector<Cause>& causes) {
  std::map<std::string, Cause> out;
  for (const Cause& cause : causes) {
    auto [at, inserted] = out.emplace(cause.key(), cause);
    if (!inserted) at->second.bytes_per_step += cause.bytes_per_step;
  }
  return out;
}

int changeOrder(const std::string& change) {
  static const char* const order[] = {"new", "grown", "shrunk", "gone", "same"};
  for (int i = 0; i < 5; ++i) {
    if (change == order[i]) return i;
  }
  return 5;
}

void compareCauses(const ComparableReport& a, const ComparableReport& b, ReportDiff& diff) {
  std::map<std::string, Cause> before = causesByKey(a.causes);
  std::map<std::string, Cause> after = causesByKey(b.causes);
  auto fill = [](CauseDiff& out, const Cause& cause) {
    out.category = cause.category;
    out.op = cause.op;
    out.site = cause.site;
    out.holder = cause.holder;
    out.hint = cause.hint;
  };
  for (const auto& [key, cause] : after) {
    CauseDiff out;
    fill(out, cause);
    out.after_bytes_per_step = cause.bytes_per_step;
    out.after_freed = cause.freed;
    out.after_ranks = cause.ranks;
    out.change = "new";
    if (auto old = before.find(key); old != before.end()) {
      out.before_bytes_per_step = old->second.bytes_per_step;
      out.before_freed = old->second.freed;
      out.before_ranks = old->second.ranks;
      double was = old->second.bytes_per_step, now = cause.bytes_per_step;
      out.change = now > was * kSameRateFactor + 1   ? "grown"
                   : was > now * kSameRateFactor + 1 ? "shrunk"
                                                     : "same";
    }
    diff.causes.push_back(std::move(out));
  }
  for (const auto& [key, cause] : before) {
    if (after.count(key)) continue;
    CauseDiff out;
    fill(out, cause);
    out.holder.clear();  // no longer held
    out.before_bytes_per_step = cause.bytes_per_step;
    out.before_freed = cause.freed;
    out.before_ranks = cause.ranks;
    out.change = "gone";
    diff.causes.push_back(std::move(out));
  }
  std::stable_sort(diff.causes.begin(), diff.causes.end(),
                   [](const CauseDiff& x, const CauseDiff& y) {
                     if (changeOrder(x.change) != changeOrder(y.change)) {
                       return changeOrder(x.change) < changeOrder(y.change);
                     }
                     return std::max(x.after_bytes_per_step, x.before_bytes_per_step) >
                            std::max(y.after_bytes_per_step, y.before_bytes_per_step);
                   });
}

// A fit's peak is compared at the largest size both fits measured.
void comparePeaksOfFits(const ComparableReport& a, const ComparableReport& b, ReportDiff& diff) {
  const Split* before = findSplit(a, "size");
  const Split* after = findSplit(b, "size");
  if (before == nullptr || after == nullptr) return;
  for (auto it = before->parts.rbegin(); it != before->parts.rend(); ++it) {
    for (const auto& part : after->parts) {
      if (part.first != it->first) continue;
      diff.before_peak = it->second;
      diff.after_peak = part.second;
      return;
    }
  }
  if (!before->parts.empty()) diff.before_peak = before->parts.back().second;
  if (!after->parts.empty()) diff.after_peak = after->parts.back().second;
  diff.warnings.push_back(
      "the fits measured no size in common: their largest sizes' peaks are "
      "compared");
}

}  // namespace

bool ReportDiff::peakChanged() const { return std::llabs(peakChange()) > noise_bytes; }

std::size_t ReportDiff::newCauses() const {
  return static_cast<std::size_t>(std::count_if(
      causes.begin(), causes.end(), [](const CauseDiff& cause) { return cause.change == "new"; }));
}

bool ReportDiff::empty() const {
  if (peakChanged()) return false;
  for (const CauseDiff& cause : causes) {
    if (cause.change != "same") return false;
  }
  if (capacity && capacity->before_largest_size != capacity->after_largest_size) return false;
  for (const DiffBreakdown& breakdown : breakdowns) {
    for (const DiffEntry& entry : breakdown.entries) {
      if (std::llabs(entry.change()) > noise_bytes) return false;
    }
  }
  return true;
}

ReportDiff diffReports(const std::string& before_json, const std::string& after_json,
                       const DiffOptions& options) {
  ComparableReport a = compare::readComparable(before_json, options.before_label);
  ComparableReport b = compare::readComparable(after_json, options.after_label);
  ReportDiff diff;
  refuseMismatch(a, b, options, diff);
  diff.kind = a.kind;
  diff.before_label = options.before_label;
  diff.after_label = options.after_label;
  diff.before_schema = a.schema;
  diff.after_schema = b.schema;
  diff.peak_measure = a.peak_measure;
  diff.before_peak = a.peak;
  diff.after_peak = b.peak;
  if (a.kind == "fit") comparePeaksOfFits(a, b, diff);
  diff.noise_bytes = std::max(a.noise, b.noise);
  warnAboutSteps(a, b, diff);
  compareBreakdowns(a, b, diff);
  compareCauses(a, b, diff);
  if (a.kind == "fit") {
    diff.capacity = CapacityDiff{a.largest_size, b.largest_size, a.budget_bytes,
                                 b.budget_bytes, a.model,        b.model};
    if (a.budget_bytes != b.budget_bytes) {
      diff.warnings.push_back("the fits predicted against other budgets");
    }
  }
  diff.timeline_axis = a.timeline_axis;
  diff.before_timeline = a.timeline;
  diff.after_timeline = b.timeline;
  return diff;
}

std::optional<double> parseTolerance(const std::string& text) {
  std::string number = text;
  while (!number.empty() && std::isspace(static_cast<unsigned char>(number.back()))) {
    number.pop_back();
  }
  bool percent = !number.empty() && number.back() == '%';
  if (percent) number.pop_back();
  while (!number.empty() && std::isspace(static_cast<unsigned char>(number.back()))) {
    number.pop_back();
  }
  if (number.empty() || std::isspace(static_cast<unsigned char>(number.front()))) {
    return std::nullopt;
  }
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  if (percent) value /= 100;
  if (value >= 10) return std::nullopt;
  return value;
}

}  // namespace memseal
