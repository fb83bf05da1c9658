// PeakReport and FitReport as JSON (memseal.explain/1, memseal.fit/2; docs/explain-json.md). Keys
// in a fixed order, schema first, as in memseal.check/1.
#include <nlohmann/json.hpp>

#include "common/schemas.h"
#include "memseal/explain.h"
#include "report/json_fields.h"

namespace memseal {

namespace {

using Json = nlohmann::ordered_json;

Json optionalInt(const std::optional<std::int64_t>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json remediesJson(const std::vector<PeakRemedy>& remedies) {
  Json list = Json::array();
  for (const PeakRemedy& remedy : remedies) {
    list.push_back({{"kind", remedy.kind},
                    {"target", remedy.target},
                    {"bytes", remedy.bytes},
                    {"upper_bound", remedy.upper_bound},
                    {"change", remedy.change},
                    {"cost", remedy.cost}});
  }
  return list;
}

Json modulesJson(const std::vector<ModuleBytes>& modules) {
  Json list = Json::array();
  for (const ModuleBytes& module : modules) {
    Json by_role = Json::object();
    for (int role = 0; role < kMemoryRoleCount; ++role) {
      if (module.role_bytes[role] != 0) {
        by_role[roleId(static_cast<MemoryRole>(role))] = module.role_bytes[role];
      }
    }
    list.push_back({{"module", module.module},
                    {"bytes", module.bytes},
                    {"count", module.count},
                    {"roles", by_role}});
  }
  return list;
}

Json devicesJson(const std::vector<DevicePeak>& devices) {
  Json list = Json::array();
  for (const DevicePeak& device : devices) {
    Json roles = Json::array();
    for (const RoleBytes& role : device.roles) {
      roles.push_back({{"role", roleId(role.role)}, {"bytes", role.bytes}, {"count", role.count}});
    }
    Json sites = Json::array();
    for (const DevicePeakSite& site : device.sites) {
      sites.push_back({{"op", site.op},
                       {"scope", site.scope},
                       {"role", roleId(site.role)},
                       {"bytes", site.bytes},
                       {"count", site.count}});
    }
    list.push_back({{"device", "cuda:" + std::to_string(device.device)},
                    {"step", device.step},
                    {"allocated_bytes", device.allocated_bytes},
                    {"reserved_bytes", device.reserved_bytes},
                    {"cached_free_bytes", device.cachedFreeBytes()},
                    {"pending_free_bytes", device.pending_free_bytes},
                    {"baseline_allocated_bytes", device.baseline_allocated_bytes},
                    {"end_allocated_bytes", device.end_allocated_bytes},
                    {"reserved_peak_bytes", device.reserved_peak_bytes},
                    {"blocks", device.blocks},
                    {"events", device.events},
                    {"dropped_events", device.dropped_events},
                    {"roles", roles},
                    {"modules", modulesJson(device.modules)},
                    {"sites", sites}});
  }
  return list;
}

}  // namespace

std::string PeakReport::toJson() const {
  Json json;
  json["schema"] = common::kExplainSchema.tag();
  // Only in a distributed job's reports, as in memseal.check/1.
  if (rank) json["rank"] = report::rankJson(*rank);
  json["steps"] = steps;
  json["warmup"] = warmup;
  json["peak_step"] = peak_step;
  json["peak_bytes"] = peak_bytes;
  json["baseline_bytes"] = baseline_bytes;
  json["end_bytes"] = end_bytes;
  json["peak_live_count"] = peak_live_count;
  json["events_in_step"] = events_in_step;
  json["peak_event"] = peak_event;
  Json role_list = Json::array();
  for (const RoleBytes& role : roles) {
    role_list.push_back(
        {{"role", roleId(role.role)}, {"bytes", role.bytes}, {"count", role.count}});
  }
  json["roles"] = role_list;
  json["modules"] = modulesJson(modules);
  Json site_list = Json::array();
  for (const PeakSite& site : sites) {
    site_list.push_back({{"op", site.site.op},
                         {"outer_op", site.site.outer_op},
                         {"scope", site.site.scope},
                         {"frames", report::framesJson(site.site.frames)},
                         {"role", roleId(site.role)},
                         {"bytes", site.bytes},
                         {"count", site.count},
                         {"tensor", report::tensorJson(site.tensor)}});
  }
  json["sites"] = site_list;
  Json tensor_list = Json::array();
  for (const PeakTensor& tensor : tensors) {
    tensor_list.push_back({{"bytes", tensor.bytes},
                           {"role", roleId(tensor.role)},
                           {"op", tensor.op},
                           {"scope", tensor.scope},
                           {"step", tensor.step},
                           {"tensor", report::tensorJson(tensor.tensor)}});
  }
  json["tensors"] = tensor_list;
  Json points = Json::array();
  for (const auto& [event, live] : timeline) {
    points.push_back({{"event", event}, {"live_bytes", live}});
  }
  json["timeline"] = points;
  Json peaks = Json::array();
  for (const StepPeak& peak : step_peaks) {
    peaks.push_back({{"step", peak.step},
                     {"peak_bytes", peak.peak_bytes},
                     {"baseline_bytes", peak.baseline_bytes},
                     {"end_bytes", peak.end_bytes}});
  }
  json["step_peaks"] = peaks;
  json["identified"] = {{"model", model_identified}, {"optimizer", optimizer_identified}};
  json["notes"] = noteLines();
  json["backward_ran"] = backward_ran;
  json["dropped_events"] = dropped_events;
  json["remedies"] = remediesJson(remedies);
  // Only where a CUDA device was used, as in memseal.check/1.
  if (!devices.empty()) json["devices"] = devicesJson(devices);
  return json.dump(2) + "\n";
}

namespace {

Json measurementsJson(const std::vector<FitReport::Measurement>& measurements) {
  Json list = Json::array();
  for (const FitReport::Measurement& measured : measurements) {
    list.push_back({{"size", measured.size},
                    {"peak_bytes", measured.peak_bytes},
                    {"fits", measured.fits},
                    {"error", measured.error.empty() ? Json(nullptr) : Json(measured.error)}});
  }
  return list;
}

Json verificationJson(const FitReport::Verification& verification) {
  return {{"size", verification.size},
          {"predicted_peak_bytes", verification.predicted_peak_bytes},
          {"measured_peak_bytes", verification.measured_peak_bytes},
          {"relative_error", verification.relative_error},
          {"within_budget", verification.within_budget},
          {"error", verification.error.empty() ? Json(nullptr) : Json(verification.error)},
          {"missed", verification.missed},
          {"searched", measurementsJson(verification.searched)},
          {"measured_max_size", optionalInt(verification.measured_max_size)},
          {"measured_max_peak_bytes", optionalInt(verification.measured_max_peak_bytes)},
          {"smallest_failing_size", optionalInt(verification.smallest_failing_size)},
          {"model_miss", verification.model_miss ? Json(*verification.model_miss) : Json(nullptr)}};
}

Json phasesJson(const FitReport& report) {
  Json list = Json::array();
  for (const PhaseModel& phase : report.phases) {
    list.push_back({{"phase", phase.phase},
                    {"model", phase.model},
                    {"c0", phase.c0},
                    {"c1", phase.c1},
                    {"c2", phase.c2},
                    {"max_relative_residual", phase.max_residual},
                    {"holdout_relative_error", phase.holdout_error}});
  }
  return list;
}

}  // namespace

std::string FitReport::toJson() const {
  Json json;
  json["schema"] = common::kFitSchema.tag();
  json["memory"] = memory;
  Json point_list = Json::array();
  for (const FitPoint& point : points) {
    Json phase_peaks = Json::object();
    for (const PhasePeak& phase : point.phases) phase_peaks[phase.phase] = phase.peak_bytes;
    point_list.push_back(
        {{"size", point.size}, {"peak_bytes", point.peak_bytes}, {"phases", phase_peaks}});
  }
  json["points"] = point_list;
  json["model"] = model;
  json["is_linear"] = is_linear;
  json["linear"] = {{"intercept", linear_intercept},
                    {"slope", linear_slope},
                    {"max_relative_residual", linear_max_residual},
                    {"holdout_relative_error", linear_holdout_error}};
  json["quadratic"] = has_quadratic ? Json{{"c0", quadratic_c0},
                                           {"c1", quadratic_c1},
                                           {"c2", quadratic_c2},
                                           {"max_relative_residual", quadratic_max_residual},
                                           {"holdout_relative_error", quadratic_holdout_error}}
                                    : Json(nullptr);
  json["phases"] = phasesJson(*this);
  json["limiting_phase"] = limiting_phase.empty() ? Json(nullptr) : Json(limiting_phase);
  Json changes = Json::array();
  for (const PhaseChange& change : phase_changes) {
    changes.push_back({{"size", change.size}, {"phase", change.phase}});
  }
  json["phase_changes"] = changes;
  json["tolerance"] = tolerance;
  json["budget_bytes"] = optionalInt(budget_bytes);
  json["budget_source"] = budget_source;
  json["margin"] = margin;
  json["predicted_max_size"] = optionalInt(predicted_max_size);
  json["predicted_peak_bytes"] = optionalInt(predicted_peak_bytes);
  json["extrapolation"] = predicted_max_size ? Json(extrapolation) : Json(nullptr);
  json["largest_size"] = optionalInt(largestSize());
  json["largest_size_measured"] = verification && verification->missed;
  json["refusal"] = refusal.empty() ? Json(nullptr) : Json(refusal);
  json["verify"] = verification ? verificationJson(*verification) : Json(nullptr);
  return json.dump(2) + "\n";
}

}  // namespace memseal
