// The comparison of two reports as JSON: schema memseal.diff/1 (docs/diff-json.md), "schema"
// first, keys in a fixed order.
#include <nlohmann/json.hpp>

#include "common/schemas.h"
#include "memseal/diff.h"

namespace memseal {

namespace {

using Json = nlohmann::ordered_json;

Json diffSizeOrNull(const std::optional<std::int64_t>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json sideJson(const std::string& label, const std::string& schema, std::int64_t peak,
              const std::vector<DiffPoint>& timeline) {
  Json points = Json::array();
  for (const DiffPoint& point : timeline)
    points.push_back({{"x", point.x}, {"bytes", point.bytes}});
  return {{"label", label}, {"schema", schema}, {"peak_bytes", peak}, {"timeline", points}};
}

Json breakdownsJson(const std::vector<DiffBreakdown>& breakdowns) {
  Json list = Json::array();
  for (const DiffBreakdown& breakdown : breakdowns) {
    Json entries = Json::array();
    for (const DiffEntry& entry : breakdown.entries) {
      entries.push_back({{"key", entry.key},
                         {"before", entry.before},
                         {"after", entry.after},
                         {"change", entry.change()}});
    }
    list.push_back({{"dimension", breakdown.dimension},
                    {"additive", breakdown.additive},
                    {"entries", entries}});
  }
  return list;
}

Json causesJson(const std::vector<CauseDiff>& causes) {
  Json list = Json::array();
  for (const CauseDiff& cause : causes) {
    list.push_back({{"change", cause.change},
                    {"category", cause.category},
                    {"op", cause.op},
                    {"site", cause.site},
                    {"before_bytes_per_step", cause.before_bytes_per_step},
                    {"after_bytes_per_step", cause.after_bytes_per_step},
                    {"before_freed", cause.before_freed},
                    {"after_freed", cause.after_freed},
                    {"before_ranks", cause.before_ranks},
                    {"after_ranks", cause.after_ranks},
                    {"holder", cause.holder},
                    {"hint", cause.hint}});
  }
  return list;
}

}  // namespace

std::string ReportDiff::toJson() const {
  Json json;
  json["schema"] = common::kDiffSchema.tag();
  json["kind"] = kind;
  json["empty"] = empty();
  json["peak_measure"] = peak_measure;
  json["peak_change"] = peakChange();
  json["noise_bytes"] = noise_bytes;
  json["before"] = sideJson(before_label, before_schema, before_peak, before_timeline);
  json["after"] = sideJson(after_label, after_schema, after_peak, after_timeline);
  json["timeline_axis"] = timeline_axis;
  json["breakdowns"] = breakdownsJson(breakdowns);
  json["causes"] = causesJson(causes);
  json["capacity"] =
      capacity ? Json{{"before_largest_size", diffSizeOrNull(capacity->before_largest_size)},
                      {"after_largest_size", diffSizeOrNull(capacity->after_largest_size)},
                      {"before_budget_bytes", diffSizeOrNull(capacity->before_budget_bytes)},
                      {"after_budget_bytes", diffSizeOrNull(capacity->after_budget_bytes)},
                      {"before_model", capacity->before_model},
                      {"after_model", capacity->after_model}}
               : Json(nullptr);
  json["warnings"] = warnings;
  return json.dump(2) + "\n";
}

}  // namespace memseal
