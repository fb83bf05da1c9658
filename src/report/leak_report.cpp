// LeakReport as text for people and as JSON (schema memseal.check/1) for tools.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "memseal/leak_detector.h"
#include "report/format.h"

namespace memseal {

namespace {

nlohmann::json tensorJson(const TensorInfo& tensor) {
  if (!tensor.known) return nullptr;
  return {{"shape", tensor.shape},
          {"dtype", tensor.dtype},
          {"requires_grad", tensor.requires_grad},
          {"grad_fn",
           tensor.grad_fn.empty() ? nlohmann::json(nullptr) : nlohmann::json(tensor.grad_fn)}};
}

}  // namespace

std::string LeakReport::toText() const {
  std::ostringstream out;
  std::uint32_t observed = steps > warmup ? steps - warmup : 0;
  if (!leak) {
    out << "memseal: no leak in " << observed << " steps after " << warmup << " warm-up steps";
    if (!per_step.empty()) {
      out << " (tensor memory " << report::bytesText(per_step.back().live_bytes)
          << " live at the end)";
    }
    out << "\n";
    return out.str();
  }
  out << "memseal: LEAK: " << findings.size() << " finding" << (findings.size() == 1 ? "" : "s")
      << " in " << observed << " steps after " << warmup << " warm-up steps";
  if (detected_at_step) out << " (clear from step " << *detected_at_step << " on)";
  out << "\n";
  int index = 0;
  for (const LeakFinding& finding : findings) {
    out << "\n[" << ++index << "] " << categoryId(finding.category) << "\n";
    char rate[160];
    if (finding.category == LeakCategory::kUntrackedGrowth) {
      std::snprintf(rate, sizeof(rate), "resident memory +%s/step, tensor memory flat",
                    report::bytesText(static_cast<std::int64_t>(finding.bytes_per_step)).c_str());
    } else if (finding.retained == "autograd graph nodes") {
      std::snprintf(
          rate, sizeof(rate),
          "%.2g autograd graph/step kept alive (%u of %u steps), resident memory +%s/step",
          finding.count_per_step, finding.steps_with_survivors, observed,
          report::bytesText(static_cast<std::int64_t>(finding.bytes_per_step)).c_str());
    } else {
      std::snprintf(rate, sizeof(rate), "+%s/step, %.3g tensor%s/step (%lld retained, %s)",
                    report::bytesText(static_cast<std::int64_t>(finding.bytes_per_step)).c_str(),
                    finding.count_per_step, finding.count_per_step == 1.0 ? "" : "s",
                    static_cast<long long>(finding.survivors),
                    report::bytesText(finding.survivor_bytes).c_str());
    }
    out << "    grows     " << rate << "\n";
    if (finding.category != LeakCategory::kUntrackedGrowth) {
      out << "    made by   " << finding.site.op;
      if (!finding.site.outer_op.empty() && finding.site.outer_op != finding.site.op) {
        out << "  (inside " << finding.site.outer_op << ")";
      }
      if (!finding.site.scope.empty()) out << "  in scope " << finding.site.scope;
      out << "\n";
      std::vector<std::string> lines = report::stackLines(finding.site.frames);
      for (std::size_t i = 0; i < lines.size(); ++i) {
        out << (i == 0 ? "    at        " : "              ") << lines[i] << "\n";
      }
      out << "    tensor    " << report::tensorText(finding.tensor) << "\n";
    }
    out << "    fix       " << report::wrap(finding.hint, 88, "              ") << "\n";
  }
  return out.str();
}

std::string LeakReport::toJson() const {
  nlohmann::json json;
  json["schema"] = "memseal.check/1";
  json["verdict"] = leak ? "leak" : "no_leak";
  json["steps"] = steps;
  json["warmup"] = warmup;
  json["detected_at_step"] =
      detected_at_step ? nlohmann::json(*detected_at_step) : nlohmann::json(nullptr);
  json["backward_ran"] = backward_ran;
  json["findings"] = nlohmann::json::array();
  for (const LeakFinding& finding : findings) {
    nlohmann::json frames = nlohmann::json::array();
    for (const StackFrame& frame : finding.site.frames) {
      frames.push_back({{"function", frame.function},
                        {"file", frame.file},
                        {"line", frame.line},
                        {"library", frame.library},
                        {"internal", frame.is_internal}});
    }
    json["findings"].push_back({{"category", categoryId(finding.category)},
                                {"retained", finding.retained},
                                {"bytes_per_step", finding.bytes_per_step},
                                {"count_per_step", finding.count_per_step},
                                {"survivors", finding.survivors},
                                {"survivor_bytes", finding.survivor_bytes},
                                {"steps_with_survivors", finding.steps_with_survivors},
                                {"op", finding.site.op},
                                {"outer_op", finding.site.outer_op},
                                {"scope", finding.site.scope},
                                {"frames", frames},
                                {"tensor", tensorJson(finding.tensor)},
                                {"hint", finding.hint}});
  }
  nlohmann::json live = nlohmann::json::array();
  nlohmann::json per_step_json = nlohmann::json::array();
  for (const StepSample& sample : per_step) {
    live.push_back(sample.live_bytes);
    per_step_json.push_back({{"step", sample.step},
                             {"live_bytes", sample.live_bytes},
                             {"live_count", sample.live_count},
                             {"resident_bytes", sample.resident_bytes},
                             {"graph_nodes_alive", sample.graph_nodes_alive}});
  }
  json["live_bytes"] = live;
  json["per_step"] = per_step_json;
  return json.dump(2) + "\n";
}

}  // namespace memseal
