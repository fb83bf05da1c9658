// LeakReport as JSON for tools. Keys are written in a fixed order with "schema" first
// (nlohmann::ordered_json), from one schema constant; leak_json_reader.cpp reads them back.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/schemas.h"
#include "memseal/leak_detector.h"
#include "report/json_fields.h"

namespace memseal {

const char* const kCheckReportSchema = common::kCheckSchema.name;
const int kCheckReportVersion = common::kCheckSchema.version;

namespace {

using Json = nlohmann::ordered_json;
using report::framesJson;
using report::rankJson;
using report::tensorJson;

Json shapesJson(const ShapeRange& shapes) {
  if (shapes.min.empty()) return nullptr;
  return {{"min", shapes.min}, {"max", shapes.max}, {"distinct", shapes.distinct}};
}

// The fields a finding and each of its parts share: what is retained, how fast it grows, where it
// is made and what it looks like. Appended to `json` in this order.
template <typename Growth>
void writeGrowthFields(Json& json, const Growth& growth) {
  json["retained"] = growth.retained;
  json["bytes_per_step"] = growth.bytes_per_step;
  json["count_per_step"] = growth.count_per_step;
  json["survivors"] = growth.survivors;
  json["survivor_bytes"] = growth.survivor_bytes;
  json["steps_with_survivors"] = growth.steps_with_survivors;
  json["steps_observed"] = growth.steps_observed;
  json["op"] = growth.site.op;
  json["outer_op"] = growth.site.outer_op;
  json["scope"] = growth.site.scope;
  json["frames"] = framesJson(growth.site.frames);
  json["tensor"] = tensorJson(growth.tensor);
  json["shapes"] = shapesJson(growth.shapes);
}

Json partJson(const LeakPart& part) {
  Json json = Json::object();
  writeGrowthFields(json, part);
  return json;
}

Json deviceJson(const DeviceMemorySummary& device) {
  Json per_step = Json::array();
  for (const DeviceStepPoint& point : device.per_step) {
    per_step.push_back(
        {{"step", point.step}, {"allocated", point.allocated}, {"reserved", point.reserved}});
  }
  return {{"device", device.device},
          {"verdict", device.verdict},
          {"allocated", device.allocated},
          {"reserved", device.reserved},
          {"peak_allocated", device.peak_allocated},
          {"peak_reserved", device.peak_reserved},
          {"inactive_split_bytes", device.inactive_split_bytes},
          {"largest_free_extent", device.largest_free_extent},
          {"hint", device.hint},
          {"growth_per_step", device.growth_per_step},
          {"growth_shown_as", device.growth_shown_as},
          {"per_step", per_step}};
}

Json freedJson(const HeldUntilFreed& freed) {
  return {{"first_step", freed.first_step},
          {"last_step", freed.last_step},
          {"freed_at_step", freed.freed_at_step},
          {"times", freed.times},
          {"steps_per_time", freed.steps_per_time},
          {"peak_bytes", freed.peak_bytes},
          {"phase", freed.phase},
          {"building_up", freed.building_up},
          {"found_after_steps", freed.found_after_steps},
          {"iterations_per_time", freed.iterations_per_time},
          {"by_collector", freed.by_collector}};
}

Json findingJson(const LeakFinding& finding) {
  Json parts = Json::array();
  for (const LeakPart& part : finding.parts) parts.push_back(partJson(part));
  Json item = {{"category", categoryId(finding.category)}};
  writeGrowthFields(item, finding);
  item["explained_bytes_per_step"] = finding.explained_bytes_per_step;
  item["resident_bytes_per_step"] = finding.resident_bytes_per_step;
  item["parts"] = parts;
  item["hint"] = finding.hint;
  // Only for what was freed before the report, as older readers expect.
  if (finding.freed) item["freed"] = freedJson(*finding.freed);
  return item;
}

// The fields the notes are made of, each only where it says something (older readers expect none).
void writeNoteFields(const LeakReport& report, Json& json) {
  if (!report.graph_nodes_unwatched.empty()) {
    json["graph_nodes_unwatched"] = report.graph_nodes_unwatched;
  }
  if (!report.freed_build_ups.empty()) {
    Json build_ups = Json::array();
    for (const LeakFinding& build_up : report.freed_build_ups) {
      build_ups.push_back(findingJson(build_up));
    }
    json["freed_build_ups"] = build_ups;
  }
  if (report.malloc_free) {
    json["malloc_free"] = {{"after_warmup_bytes", report.malloc_free->after_warmup_bytes},
                           {"now_bytes", report.malloc_free->now_bytes},
                           {"kept_graphs_cost", report.malloc_free->kept_graphs_cost}};
  }
  if (report.phase_changes_capped_at != 0) {
    json["phase_changes_capped_at"] = report.phase_changes_capped_at;
  }
  if (!report.cuda_oom_file.empty()) json["cuda_oom_file"] = report.cuda_oom_file;
  const ReportOrigin& origin = report.origin;
  Json origin_json = Json::object();
  if (origin.taken_after_step) {
    origin_json["taken_after_step"] = *origin.taken_after_step;
    origin_json["ms_before_end"] = origin.ms_before_end;
  }
  if (origin.newest_steps_kept != 0) origin_json["newest_steps_kept"] = origin.newest_steps_kept;
  if (!origin.interim_age.empty()) {
    origin_json["interim_age"] = origin.interim_age;
    origin_json["pid"] = origin.pid;
  }
  if (origin.forked_from_pid != 0) origin_json["forked_from_pid"] = origin.forked_from_pid;
  if (!origin_json.empty()) json["origin"] = origin_json;
}

}  // namespace

std::string LeakReport::toJson() const {
  Json json;
  json["schema"] = common::kCheckSchema.tag();
  json["verdict"] = leak ? "leak" : "no_leak";
  // Only in a distributed job's reports.
  if (rank) json["rank"] = rankJson(*rank);
  json["steps"] = steps;
  json["warmup"] = warmup;
  json["detected_at_step"] = detected_at_step ? Json(*detected_at_step) : Json(nullptr);
  json["backward_ran"] = backward_ran;
  // The notes in words, for people and older readers; the fields they come from beside them.
  json["notes"] = noteLines();
  writeNoteFields(*this, json);
  // Only where memseal took the steps.
  if (!steps_from.empty()) json["steps_from"] = steps_from;
  json["findings"] = Json::array();
  for (const LeakFinding& finding : findings) {
    json["findings"].push_back(findingJson(finding));
  }
  Json live = Json::array();
  Json per_step_json = Json::array();
  for (const StepSample& sample : per_step) {
    live.push_back(sample.live_bytes);
    Json point = {{"step", sample.step},
                  {"live_bytes", sample.live_bytes},
                  {"live_count", sample.live_count},
                  {"resident_bytes", sample.resident_bytes},
                  {"graph_nodes_alive", sample.graph_nodes_alive}};
    if (!phases.empty()) point["phase"] = sample.phase;
    per_step_json.push_back(std::move(point));
  }
  json["live_bytes"] = live;
  json["per_step"] = per_step_json;
  // Only where the program's steps had phases.
  if (!phases.empty()) {
    Json phases_json = Json::array();
    for (const PhaseSummary& phase : phases) {
      phases_json.push_back({{"name", phase.name},
                             {"first_step", phase.first_step},
                             {"steps", phase.steps},
                             {"runs", phase.runs},
                             {"backward_ran", phase.backward_ran}});
    }
    json["phases"] = phases_json;
  }
  // Only where CUDA events were seen: a CPU-only report stays as it was.
  if (!devices.empty()) {
    Json devices_json = Json::array();
    for (const DeviceMemorySummary& device : devices) devices_json.push_back(deviceJson(device));
    json["devices"] = devices_json;
  }
  // Only where a Python program's heap was searched; the Python module adds its own keys beside.
  if (!holders.empty()) {
    Json holders_json = Json::array();
    for (const LeakHolder& holder : holders) holders_json.push_back(report::holderJson(holder));
    json["python"] = {{"holders", holders_json}};
  }
  return json.dump(2) + "\n";
}

}  // namespace memseal
