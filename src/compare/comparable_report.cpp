// Reads each kind of report into a ComparableReport. The leak check goes through LeakReport's own
// strict reader; explain, fit and merged reports are read field by field with the same strict
// helpers, so a damaged file is refused with what is wrong, never compared half-read.
#include "compare/comparable_report.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <regex>
#include <unordered_map>

#include "common/schemas.h"
#include "common/text.h"
#include "memseal/leak_detector.h"
#include "report/finding_cause.h"
#include "report/json_fields.h"

namespace memseal::compare {

namespace {

using Json = nlohmann::ordered_json;
using report::read;
using report::readOr;

// More bytes than any memory holds (64 PiB): a report's byte counts are read up to it, so that the
// sums and differences of the comparison cannot overflow.
constexpr std::int64_t kMaxReportBytes = std::int64_t{1} << 56;

std::int64_t boundedBytes(std::int64_t bytes) {
  return std::clamp<std::int64_t>(bytes, 0, kMaxReportBytes);
}
std::int64_t boundedBytes(std::uint64_t bytes) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(bytes, kMaxReportBytes));
}

const Json& arrayField(const Json& document, const char* name, const std::string& where) {
  static const Json empty = Json::array();
  if (!document.contains(name) || document.at(name).is_null()) return empty;
  const Json& value = document.at(name);
  if (!value.is_array()) report::fail(where + "." + name + " is not an array");
  return value;
}

// A file of the program's own, as two runs of one program share them: not code generated while it
// ran (torch.compile's inductor files, FX's "<eval_with_key>.N"), whose names change from run to
// run.
bool programFile(const std::string& file) {
  return !file.empty() && file[0] != '<' && file.find("/torchinductor_") == std::string::npos;
}

// The program's own first frame of a JSON stack: "file:line" as reports show it, or "".
std::string ownLine(const Json& frames, const std::string& where, std::set<std::string>* files) {
  if (!frames.is_array()) return "";
  for (std::size_t i = 0; i < frames.size(); ++i) {
    std::string at = where + ".frames[" + std::to_string(i) + "]";
    if (readOr<bool>(frames[i], "internal", at, false)) continue;
    std::string file = readOr<std::string>(frames[i], "file", at, "");
    if (file.empty()) continue;
    if (programFile(file)) files->insert(common::baseName(file));
    std::string shown = readOr<std::string>(frames[i], "shown_file", at, common::shownPath(file));
    return shown + ":" + std::to_string(readOr<int>(frames[i], "line", at, 0));
  }
  return "";
}

// "file:line" with the file as reports show it (relative to the working directory under it).
std::string shownSite(const std::string& site) {
  std::size_t colon = site.rfind(':');
  if (site.empty() || colon == std::string::npos) return site;
  return common::shownPath(site.substr(0, colon)) + site.substr(colon);
}

// Adds `bytes` to `key`'s part, keeping the parts in the order keys first came.
void addPart(Split& split, std::unordered_map<std::string, std::size_t>& index,
             const std::string& key, std::int64_t bytes) {
  auto [at, inserted] = index.emplace(key, split.parts.size());
  if (inserted) split.parts.emplace_back(key, 0);
  split.parts[at->second].second += bytes;
}

// What the listed parts of an additive split leave of the peak, as one part: the lists keep the
// largest entries only, so their changes add up to the peak's change with it.
void addRest(Split& split, std::int64_t peak) {
  std::int64_t listed = 0;
  for (const auto& part : split.parts) listed += part.second;
  if (listed != peak) split.parts.emplace_back("(rest)", peak - listed);
}

std::int64_t nonNegative(const Json& object, const char* name, const std::string& where) {
  auto value = read<std::int64_t>(object, name, where);
  if (value < 0) report::fail(where + "." + name + " is negative");
  if (value > kMaxReportBytes) report::fail(where + "." + name + " is more than any memory holds");
  return value;
}

void readCheckCauses(const LeakReport& report, ComparableReport& out) {
  // The first holder of each finding (the report's reader has checked their indices).
  std::map<std::size_t, std::string> holders;
  for (const LeakHolder& holder : report.holders) {
    if (holder.finding >= 0) {
      holders.emplace(static_cast<std::size_t>(holder.finding), holder.description);
    }
  }
  for (std::size_t i = 0; i < report.findings.size(); ++i) {
    const LeakFinding& finding = report.findings[i];
    Cause cause;
    cause.category = categoryId(finding.category);
    cause.op = finding.site.op;
    cause.site = shownSite(report::causeSite(finding.site.frames));
    for (const StackFrame& frame : finding.site.frames) {
      if (!frame.is_internal && programFile(frame.file)) {
        out.source_files.insert(common::baseName(frame.file));
      }
    }
    cause.bytes_per_step = finding.bytes_per_step;
    cause.freed = finding.freed.has_value();
    cause.hint = finding.hint;
    if (auto holder = holders.find(i); holder != holders.end()) cause.holder = holder->second;
    out.causes.push_back(std::move(cause));
  }
}

// How `memseal run` took the report's steps (LeakReport::steps_from): the step each source
// ended, without its count.
std::set<std::string> stepRules(const std::vector<std::string>& steps_from) {
  static const std::regex rule(
      "(one step per (?:outermost )?call of [^ ,]+|time windows of [^ ]+)");
  std::set<std::string> rules;
  std::smatch match;
  for (const std::string& line : steps_from) {
    if (std::regex_search(line, match, rule)) rules.insert(match[1].str());
  }
  return rules;
}

ComparableReport readCheck(const std::string& json) {
  LeakReport report = LeakReport::fromJson(json);
  ComparableReport out;
  out.kind = "check";
  out.peak_measure = "the most tracked tensor memory at a step boundary";
  out.steps = report.steps;
  out.warmup = report.warmup;
  std::int64_t low = INT64_MAX, high = 0, largest_move = 0, previous = -1;
  std::map<std::uint32_t, std::int64_t> phase_peaks;
  for (const StepSample& sample : report.per_step) {
    std::int64_t live = boundedBytes(sample.live_bytes);
    out.peak = std::max(out.peak, live);
    out.timeline.push_back({double(sample.step), double(live)});
    auto& phase_peak = phase_peaks[sample.phase];
    phase_peak = std::max(phase_peak, live);
    if (sample.step < report.warmup) continue;
    low = std::min(low, live);
    high = std::max(high, live);
    if (previous >= 0) largest_move = std::max(largest_move, std::abs(live - previous));
    previous = live;
  }
  out.noise = report.leak ? largest_move : (high >= low ? high - low : 0);
  out.timeline_axis = "step";
  if (report.phases.size() > 1) {
    Split phases{"phase", false, {}};
    for (const auto& [index, bytes] : phase_peaks) {
      std::string name = index < report.phases.size() ? report.phases[index].name : "";
      phases.parts.emplace_back(name.empty() ? "(unnamed)" : name, bytes);
    }
    out.splits.push_back(std::move(phases));
  }
  if (!report.devices.empty()) {
    Split devices{"device", false, {}};
    for (const DeviceMemorySummary& device : report.devices) {
      devices.parts.emplace_back(device.device + " allocated", boundedBytes(device.peak_allocated));
      devices.parts.emplace_back(device.device + " reserved", boundedBytes(device.peak_reserved));
    }
    out.splits.push_back(std::move(devices));
  }
  readCheckCauses(report, out);
  out.step_rules = stepRules(report.steps_from);
  return out;
}

// The peak by module, line and op, from the explain report's lists (largest entries only).
void readExplainSplits(const Json& document, ComparableReport& out) {
  Split modules{"module", true, {}}, lines{"line", true, {}}, ops{"op", true, {}};
  std::unordered_map<std::string, std::size_t> module_index, line_index, op_index;
  const Json& module_list = arrayField(document, "modules", "explain");
  for (std::size_t i = 0; i < module_list.size(); ++i) {
    std::string where = "explain.modules[" + std::to_string(i) + "]";
    std::string name = read<std::string>(module_list[i], "module", where);
    addPart(modules, module_index, name.empty() ? "(no module)" : name,
            nonNegative(module_list[i], "bytes", where));
  }
  const Json& sites = arrayField(document, "sites", "explain");
  for (std::size_t i = 0; i < sites.size(); ++i) {
    std::string where = "explain.sites[" + std::to_string(i) + "]";
    std::int64_t bytes = nonNegative(sites[i], "bytes", where);
    std::string op = read<std::string>(sites[i], "op", where);
    std::string line =
        sites[i].contains("frames") ? ownLine(sites[i]["frames"], where, &out.source_files) : "";
    addPart(lines, line_index, line.empty() ? "(no line) " + op : line, bytes);
    addPart(ops, op_index, op, bytes);
  }
  for (Split* split : {&modules, &lines, &ops}) {
    addRest(*split, out.peak);
    out.splits.push_back(std::move(*split));
  }
}

ComparableReport readExplain(const Json& document) {
  ComparableReport out;
  out.kind = "explain";
  out.peak_measure = "live tracked tensor bytes at the peak of the step";
  out.peak = nonNegative(document, "peak_bytes", "explain");
  out.steps = read<std::uint32_t>(document, "steps", "explain");
  out.warmup = read<std::uint32_t>(document, "warmup", "explain");
  Split roles{"role", true, {}};
  std::unordered_map<std::string, std::size_t> role_index;
  const Json& role_list = arrayField(document, "roles", "explain");
  for (std::size_t i = 0; i < role_list.size(); ++i) {
    std::string where = "explain.roles[" + std::to_string(i) + "]";
    addPart(roles, role_index, read<std::string>(role_list[i], "role", where),
            nonNegative(role_list[i], "bytes", where));
  }
  addRest(roles, out.peak);
  out.splits.push_back(std::move(roles));
  readExplainSplits(document, out);
  std::int64_t low = INT64_MAX, high = 0;
  for (const Json& step : arrayField(document, "step_peaks", "explain")) {
    std::int64_t bytes = nonNegative(step, "peak_bytes", "explain.step_peaks[]");
    low = std::min(low, bytes);
    high = std::max(high, bytes);
  }
  out.noise = high >= low ? high - low : 0;
  out.timeline_axis = "share of the step";
  double events = double(
      std::max<std::int64_t>(1, readOr<std::int64_t>(document, "events_in_step", "explain", 1)));
  for (const Json& point : arrayField(document, "timeline", "explain")) {
    double event = double(read<std::int64_t>(point, "event", "explain.timeline[]"));
    out.timeline.push_back(
        {100.0 * event / events, double(nonNegative(point, "live_bytes", "explain.timeline[]"))});
  }
  return out;
}

ComparableReport readFit(const Json& document) {
  ComparableReport out;
  out.kind = "fit";
  out.peak_measure = "the measured peak at the largest size both runs measured";
  Split sizes{"size", false, {}};
  const Json& points = arrayField(document, "points", "fit");
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::string where = "fit.points[" + std::to_string(i) + "]";
    std::int64_t size = read<std::int64_t>(points[i], "size", where);
    std::int64_t bytes = nonNegative(points[i], "peak_bytes", where);
    sizes.parts.emplace_back("size " + std::to_string(size), bytes);
    out.sizes.push_back(size);
    out.timeline.push_back({double(size), double(bytes)});
  }
  out.splits.push_back(std::move(sizes));
  out.timeline_axis = "size";
  out.model = read<std::string>(document, "model", "fit");
  // memseal.fit/1 has no largest_size: its prediction was the answer.
  auto predicted = readOr<std::int64_t>(document, "predicted_max_size", "fit", -1);
  auto largest = readOr<std::int64_t>(document, "largest_size", "fit", predicted);
  if (largest >= 0) out.largest_size = largest;
  auto budget = readOr<std::int64_t>(document, "budget_bytes", "fit", -1);
  if (budget >= 0) out.budget_bytes = budget;
  return out;
}

ComparableReport readMerged(const Json& document) {
  ComparableReport out;
  out.kind = "merged";
  out.peak_measure = "the most tracked tensor memory of any rank";
  out.world_size = read<int>(document, "world_size", "merged");
  Split ranks{"rank", false, {}};
  for (const Json& rank : arrayField(document, "ranks", "merged")) {
    int number = read<int>(rank, "rank", "merged.ranks[]");
    std::int64_t bytes = nonNegative(rank, "peak_live_bytes", "merged.ranks[]");
    ranks.parts.emplace_back("rank " + std::to_string(number), bytes);
    out.peak = std::max(out.peak, bytes);
    out.timeline.push_back({double(number), double(bytes)});
    out.steps = std::max(out.steps, readOr<std::uint32_t>(rank, "steps", "merged.ranks[]", 0));
  }
  out.splits.push_back(std::move(ranks));
  out.timeline_axis = "rank";
  const Json& findings = arrayField(document, "findings", "merged");
  for (std::size_t i = 0; i < findings.size(); ++i) {
    std::string where = "merged.findings[" + std::to_string(i) + "]";
    Cause cause;
    cause.category = read<std::string>(findings[i], "category", where);
    cause.op = read<std::string>(findings[i], "op", where);
    cause.site = shownSite(readOr<std::string>(findings[i], "site", where, ""));
    cause.ranks = readOr<std::vector<int>>(findings[i], "ranks", where, {});
    for (double bytes : readOr<std::vector<double>>(findings[i], "bytes_per_step", where, {})) {
      cause.bytes_per_step = std::max(cause.bytes_per_step, bytes);
    }
    cause.hint = readOr<std::string>(findings[i], "hint", where, "");
    if (findings[i].contains("frames")) ownLine(findings[i]["frames"], where, &out.source_files);
    out.causes.push_back(std::move(cause));
  }
  return out;
}

}  // namespace

std::string Cause::key() const {
  std::size_t slash = site.rfind('/');
  return category + "|" + op + "|" + (slash == std::string::npos ? site : site.substr(slash + 1));
}

std::string kindOfSchema(const std::string& schema) {
  for (const common::Schema& readable :
       {common::kCheckSchema, common::kExplainSchema, common::kFitSchema, common::kMergedSchema}) {
    if (schema.rfind(std::string(readable.name) + "/", 0) == 0) {
      return std::string(readable.name).substr(std::string("memseal.").size());
    }
  }
  return "";
}

ComparableReport readComparable(const std::string& json, const std::string& label) {
  Json document = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) throw std::invalid_argument(label + " is not JSON");
  std::string schema =
      document.is_object() && document.contains("schema") && document["schema"].is_string()
          ? document["schema"].get<std::string>()
          : "";
  std::string kind = kindOfSchema(schema);
  static const std::set<std::string> readable = {
      common::kCheckSchema.tag(), common::kExplainSchema.tag(), common::kFitSchema.tag(1),
      common::kFitSchema.tag(), common::kMergedSchema.tag()};
  if (kind.empty()) {
    throw std::invalid_argument(
        label + " is " + (schema.empty() ? "no memseal report" : "a " + schema + " document") +
        ": memseal diff compares memseal.check, memseal.explain, memseal.fit and memseal.merged "
        "reports");
  }
  if (readable.count(schema) == 0) {
    throw std::invalid_argument(label + " is a " + schema +
                                " report, newer than this memseal reads; update memseal");
  }
  try {
    ComparableReport out = kind == "check"     ? readCheck(json)
                           : kind == "explain" ? readExplain(document)
                           : kind == "fit"     ? readFit(document)
                                               : readMerged(document);
    out.schema = schema;
    out.timeline = thinToHighest(out.timeline, 512);
    return out;
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(label + ": " + error.what());
  }
}

std::vector<DiffPoint> thinToHighest(const std::vector<DiffPoint>& points, std::size_t limit) {
  if (points.size() <= limit || limit == 0) return points;
  std::vector<DiffPoint> out;
  std::size_t stretch = (points.size() + limit - 1) / limit;
  for (std::size_t start = 0; start < points.size(); start += stretch) {
    std::size_t end = std::min(points.size(), start + stretch);
    DiffPoint highest = points[start];
    for (std::size_t i = start; i < end; ++i) {
      if (points[i].bytes > highest.bytes) highest.bytes = points[i].bytes;
      highest.x = points[i].x;  // the stretch's last x, its highest bytes
    }
    out.push_back(highest);
  }
  return out;
}

}  // namespace memseal::compare
