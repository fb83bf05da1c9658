// LeakReport from the JSON leak_json.cpp writes. The reader accepts this version and older ones of
// the same schema, where fields were only ever added (missing newer fields take their defaults),
// and rejects other schemas and newer versions with a message saying what it got.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/schemas.h"
#include "memseal/leak_detector.h"
#include "report/json_fields.h"

namespace memseal {

namespace {

using Json = nlohmann::ordered_json;
using report::fail;
using report::field;
using report::read;
using report::readHolder;
using report::readOr;
using report::readRank;

LeakCategory categoryFromId(const std::string& id, const std::string& where) {
  for (LeakCategory category :
       {LeakCategory::kAutogradGraphRetained, LeakCategory::kGradEnabledInference,
        LeakCategory::kParametersCreatedPerStep, LeakCategory::kTensorsRetained,
        LeakCategory::kUntrackedGrowth, LeakCategory::kCreateGraphCycle}) {
    if (id == categoryId(category)) return category;
  }
  fail(where + ".category '" + id + "' is not a category this memseal knows");
}

TensorInfo readTensor(const Json& object, const std::string& where) {
  TensorInfo tensor;
  if (!object.contains("tensor") || object.at("tensor").is_null()) return tensor;
  const Json& json = object.at("tensor");
  std::string here = where + ".tensor";
  tensor.known = true;
  tensor.shape = read<std::vector<std::int64_t>>(json, "shape", here);
  tensor.dtype = read<std::string>(json, "dtype", here);
  tensor.requires_grad = read<bool>(json, "requires_grad", here);
  bool no_history = !json.contains("grad_fn") || json.at("grad_fn").is_null();
  tensor.is_leaf = readOr<bool>(json, "is_leaf", here, no_history);
  tensor.grad_fn = readOr<std::string>(json, "grad_fn", here, "");
  tensor.device = readOr<std::string>(json, "device", here, "");
  return tensor;
}

ShapeRange readShapes(const Json& object, const std::string& where) {
  ShapeRange shapes;
  if (!object.contains("shapes") || object.at("shapes").is_null()) return shapes;
  std::string here = where + ".shapes";
  const Json& json = object.at("shapes");
  shapes.min = read<std::vector<std::int64_t>>(json, "min", here);
  shapes.max = read<std::vector<std::int64_t>>(json, "max", here);
  shapes.distinct = read<std::uint32_t>(json, "distinct", here);
  return shapes;
}

AllocationSite readSite(const Json& object, const std::string& where) {
  AllocationSite site;
  site.op = read<std::string>(object, "op", where);
  site.outer_op = read<std::string>(object, "outer_op", where);
  site.scope = read<std::string>(object, "scope", where);
  const Json& frames = field(object, "frames", where);
  if (!frames.is_array()) fail(where + ".frames is not an array");
  for (std::size_t i = 0; i < frames.size(); ++i) {
    std::string here = where + ".frames[" + std::to_string(i) + "]";
    StackFrame frame;
    frame.function = read<std::string>(frames[i], "function", here);
    frame.file = read<std::string>(frames[i], "file", here);
    frame.line = read<int>(frames[i], "line", here);
    frame.library = read<std::string>(frames[i], "library", here);
    frame.is_internal = read<bool>(frames[i], "internal", here);
    site.frames.push_back(std::move(frame));
  }
  return site;
}

// Reads what writeGrowthFields wrote. `default_steps_observed` stands in for steps_observed,
// which older writers left out.
template <typename Growth>
void readGrowthFields(const Json& json, const std::string& where,
                      std::uint32_t default_steps_observed, Growth& growth) {
  growth.retained = read<std::string>(json, "retained", where);
  growth.bytes_per_step = read<double>(json, "bytes_per_step", where);
  growth.count_per_step = read<double>(json, "count_per_step", where);
  growth.survivors = read<std::int64_t>(json, "survivors", where);
  growth.survivor_bytes = read<std::int64_t>(json, "survivor_bytes", where);
  growth.steps_with_survivors = read<std::uint32_t>(json, "steps_with_survivors", where);
  growth.steps_observed =
      readOr<std::uint32_t>(json, "steps_observed", where, default_steps_observed);
  growth.site = readSite(json, where);
  growth.tensor = readTensor(json, where);
  growth.shapes = readShapes(json, where);
}

LeakPart readPart(const Json& json, const std::string& where) {
  LeakPart part;
  readGrowthFields(json, where, 0, part);
  return part;
}

HeldUntilFreed readFreed(const Json& json, const std::string& where) {
  HeldUntilFreed freed;
  freed.first_step = read<std::uint32_t>(json, "first_step", where);
  freed.last_step = read<std::uint32_t>(json, "last_step", where);
  freed.freed_at_step = read<std::uint32_t>(json, "freed_at_step", where);
  freed.times = read<std::uint32_t>(json, "times", where);
  freed.steps_per_time = read<double>(json, "steps_per_time", where);
  freed.peak_bytes = read<std::int64_t>(json, "peak_bytes", where);
  freed.phase = readOr<std::string>(json, "phase", where, "");
  freed.building_up = readOr<bool>(json, "building_up", where, false);
  freed.found_after_steps = readOr<std::uint32_t>(json, "found_after_steps", where, 0);
  freed.iterations_per_time = readOr<double>(json, "iterations_per_time", where, 0);
  freed.by_collector = readOr<bool>(json, "by_collector", where, false);
  return freed;
}

PhaseSummary readPhase(const Json& json, const std::string& where) {
  PhaseSummary phase;
  phase.name = read<std::string>(json, "name", where);
  phase.first_step = read<std::uint32_t>(json, "first_step", where);
  phase.steps = read<std::uint32_t>(json, "steps", where);
  phase.runs = read<std::uint32_t>(json, "runs", where);
  phase.backward_ran = read<bool>(json, "backward_ran", where);
  return phase;
}

DeviceMemorySummary readDevice(const Json& json, const std::string& where) {
  DeviceMemorySummary device;
  device.device = read<std::string>(json, "device", where);
  device.verdict = read<std::string>(json, "verdict", where);
  device.allocated = read<std::uint64_t>(json, "allocated", where);
  device.reserved = read<std::uint64_t>(json, "reserved", where);
  device.peak_allocated = read<std::uint64_t>(json, "peak_allocated", where);
  device.peak_reserved = read<std::uint64_t>(json, "peak_reserved", where);
  device.inactive_split_bytes = read<std::uint64_t>(json, "inactive_split_bytes", where);
  device.largest_free_extent = read<std::uint64_t>(json, "largest_free_extent", where);
  device.hint = readOr<std::string>(json, "hint", where, "");
  device.growth_per_step = readOr<double>(json, "growth_per_step", where, 0);
  device.growth_shown_as = readOr<std::string>(json, "growth_shown_as", where, "");
  if (json.contains("per_step") && !json.at("per_step").is_null()) {
    const Json& per_step = json.at("per_step");
    if (!per_step.is_array()) fail(where + ".per_step is not an array");
    for (std::size_t i = 0; i < per_step.size(); ++i) {
      std::string here = where + ".per_step[" + std::to_string(i) + "]";
      DeviceStepPoint point;
      point.step = read<std::uint32_t>(per_step[i], "step", here);
      point.allocated = read<std::uint64_t>(per_step[i], "allocated", here);
      point.reserved = read<std::uint64_t>(per_step[i], "reserved", here);
      device.per_step.push_back(point);
    }
  }
  return device;
}

// The document, checked to be a memseal.check report this memseal can read.
Json parseCheckDocument(const std::string& text) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    // Syntax, and numbers too large for a double (out_of_range), alike.
    fail(std::string("not valid JSON (") + error.what() + ")");
  }
  std::string reads = common::kCheckSchema.tag();
  if (!json.is_object() || !json.contains("schema") || !json["schema"].is_string()) {
    fail("not a memseal report: no \"schema\" (this memseal reads " + reads + ")");
  }
  std::string schema = json["schema"].get<std::string>();
  std::size_t slash = schema.rfind('/');
  std::string name = slash == std::string::npos ? schema : schema.substr(0, slash);
  std::string version_text = slash == std::string::npos ? "" : schema.substr(slash + 1);
  if (name != kCheckReportSchema) {
    fail("the file's schema is " + schema + "; this memseal reads " + reads);
  }
  if (version_text.empty() || version_text.find_first_not_of("0123456789") != std::string::npos ||
      version_text.size() > 6) {
    fail("the file's schema version '" + version_text + "' is not a number; this memseal reads " +
         reads);
  }
  if (std::stoi(version_text) > kCheckReportVersion) {
    fail("the file was written by a newer memseal (" + schema + "); this memseal reads " + reads +
         " and older");
  }
  return json;
}

// One finding; `observed_steps` is what older writers counted every finding over.
LeakFinding readFinding(const Json& item, const std::string& where, std::uint32_t observed_steps) {
  LeakFinding finding;
  finding.category = categoryFromId(read<std::string>(item, "category", where), where);
  readGrowthFields(item, where, observed_steps, finding);
  finding.explained_bytes_per_step = readOr<double>(item, "explained_bytes_per_step", where, 0);
  finding.resident_bytes_per_step = readOr<double>(item, "resident_bytes_per_step", where, 0);
  if (item.contains("parts")) {
    if (!item["parts"].is_array()) fail(where + ".parts is not an array");
    for (std::size_t p = 0; p < item["parts"].size(); ++p) {
      finding.parts.push_back(
          readPart(item["parts"][p], where + ".parts[" + std::to_string(p) + "]"));
    }
  }
  finding.hint = read<std::string>(item, "hint", where);
  if (item.contains("freed") && !item["freed"].is_null()) {
    finding.freed = readFreed(item["freed"], where + ".freed");
  }
  return finding;
}

StepSample readStepSample(const Json& item, const std::string& where) {
  StepSample sample;
  sample.step = read<std::uint32_t>(item, "step", where);
  sample.live_bytes = read<std::int64_t>(item, "live_bytes", where);
  sample.live_count = read<std::int64_t>(item, "live_count", where);
  sample.resident_bytes = read<std::int64_t>(item, "resident_bytes", where);
  sample.graph_nodes_alive = readOr<std::int64_t>(item, "graph_nodes_alive", where, 0);
  sample.phase = readOr<std::uint32_t>(item, "phase", where, 0);
  return sample;
}

// An optional array of the report (absent or null: empty), each item read by `read_item`; `path`
// names the array in messages ("python.holders"; the key itself by default).
template <typename Item, typename ReadItem>
std::vector<Item> readOptionalArray(const Json& json, const char* key, ReadItem read_item,
                                    const std::string& path = "") {
  std::vector<Item> items;
  if (!json.contains(key) || json[key].is_null()) return items;
  const Json& array = json[key];
  const std::string name = path.empty() ? std::string(key) : path;
  if (!array.is_array()) fail("report." + name + " is not an array");
  for (std::size_t i = 0; i < array.size(); ++i) {
    items.push_back(read_item(array[i], name + "[" + std::to_string(i) + "]"));
  }
  return items;
}

// The fields the notes are made of (absent from older files), then the notes in words that none of
// them makes: an older memseal's, or a tool's own.
void readNoteFields(const Json& json, std::uint32_t observed, LeakReport& report) {
  report.graph_nodes_unwatched = readOr<std::string>(json, "graph_nodes_unwatched", "report", "");
  report.freed_build_ups = readOptionalArray<LeakFinding>(
      json, "freed_build_ups", [observed](const Json& item, const std::string& where) {
        LeakFinding build_up = readFinding(item, where, observed);
        if (!build_up.freed) fail(where + " has no \"freed\"");
        return build_up;
      });
  if (json.contains("malloc_free") && !json["malloc_free"].is_null()) {
    const Json& free = json["malloc_free"];
    if (!free.is_object()) fail("report.malloc_free is not an object");
    report.malloc_free =
        MallocFreeMemory{read<std::int64_t>(free, "after_warmup_bytes", "malloc_free"),
                         read<std::int64_t>(free, "now_bytes", "malloc_free"),
                         read<bool>(free, "kept_graphs_cost", "malloc_free")};
  }
  report.phase_changes_capped_at =
      readOr<std::uint32_t>(json, "phase_changes_capped_at", "report", 0);
  report.cuda_oom_file = readOr<std::string>(json, "cuda_oom_file", "report", "");
  if (json.contains("origin") && !json["origin"].is_null()) {
    const Json& origin = json["origin"];
    if (!origin.is_object()) fail("report.origin is not an object");
    if (origin.contains("taken_after_step")) {
      report.origin.taken_after_step = read<std::uint32_t>(origin, "taken_after_step", "origin");
      report.origin.ms_before_end = read<std::int64_t>(origin, "ms_before_end", "origin");
    }
    report.origin.newest_steps_kept =
        readOr<std::uint32_t>(origin, "newest_steps_kept", "origin", 0);
    report.origin.interim_age = readOr<std::string>(origin, "interim_age", "origin", "");
    report.origin.pid = readOr<std::int64_t>(origin, "pid", "origin", 0);
    report.origin.forked_from_pid = readOr<std::int64_t>(origin, "forked_from_pid", "origin", 0);
  }
  std::vector<std::string> made = report.noteLines();
  for (std::string& line : readOr<std::vector<std::string>>(json, "notes", "report", {})) {
    auto found = std::find(made.begin(), made.end(), line);
    if (found != made.end()) {
      made.erase(found);
    } else {
      report.notes.push_back(std::move(line));
    }
  }
}

}  // namespace

LeakReport LeakReport::fromJson(const std::string& text) {
  Json json = parseCheckDocument(text);
  LeakReport report;
  std::string verdict = read<std::string>(json, "verdict", "report");
  if (verdict != "leak" && verdict != "no_leak")
    fail("verdict '" + verdict + "' is not leak or no_leak");
  report.leak = verdict == "leak";
  report.steps = read<std::uint32_t>(json, "steps", "report");
  report.warmup = read<std::uint32_t>(json, "warmup", "report");
  if (json.contains("detected_at_step") && !json["detected_at_step"].is_null()) {
    report.detected_at_step = read<std::uint32_t>(json, "detected_at_step", "report");
  }
  report.backward_ran = readOr<bool>(json, "backward_ran", "report", false);
  report.steps_from = readOr<std::vector<std::string>>(json, "steps_from", "report", {});
  const Json& findings = field(json, "findings", "report");
  if (!findings.is_array()) fail("report.findings is not an array");
  std::uint32_t observed = report.steps > report.warmup ? report.steps - report.warmup : 0;
  for (std::size_t i = 0; i < findings.size(); ++i) {
    report.findings.push_back(
        readFinding(findings[i], "findings[" + std::to_string(i) + "]", observed));
  }
  if (report.leak != !report.findings.empty()) {
    fail("verdict '" + verdict + "' disagrees with " + std::to_string(report.findings.size()) +
         " findings");
  }
  const Json& per_step = field(json, "per_step", "report");
  if (!per_step.is_array()) fail("report.per_step is not an array");
  for (std::size_t i = 0; i < per_step.size(); ++i) {
    report.per_step.push_back(readStepSample(per_step[i], "per_step[" + std::to_string(i) + "]"));
  }
  report.phases = readOptionalArray<PhaseSummary>(json, "phases", readPhase);
  bool has_phases = json.contains("phases") && !json["phases"].is_null();
  for (const StepSample& sample : report.per_step) {
    if (has_phases && sample.phase >= report.phases.size()) {
      fail("per_step step " + std::to_string(sample.step) + " names phase " +
           std::to_string(sample.phase) + " of " + std::to_string(report.phases.size()));
    }
  }
  // Optional: written only where CUDA events were seen, and absent from older files.
  report.devices = readOptionalArray<DeviceMemorySummary>(json, "devices", readDevice);
  if (json.contains("rank") && !json["rank"].is_null()) {
    if (!json["rank"].is_object()) fail("report.rank is not an object");
    report.rank = readRank(json["rank"], "report.rank");
  }
  if (json.contains("python") && !json["python"].is_null()) {
    if (!json["python"].is_object()) fail("report.python is not an object");
    report.holders =
        readOptionalArray<LeakHolder>(json["python"], "holders", readHolder, "python.holders");
    for (const LeakHolder& holder : report.holders) {
      if (holder.finding >= static_cast<int>(report.findings.size()) || holder.finding < -1) {
        fail("python.holders names finding " + std::to_string(holder.finding) + " of " +
             std::to_string(report.findings.size()));
      }
    }
  }
  readNoteFields(json, observed, report);
  return report;
}

}  // namespace memseal
