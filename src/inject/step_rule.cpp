#include "inject/step_rule.h"

#include <cstdlib>

#include "common/text.h"

namespace memseal::inject {

bool parseStepRule(const std::string& text, StepRule* rule, std::string* error) {
  StepRule parsed;
  if (text == "auto") {
    parsed.kind = StepRule::Kind::kAuto;
  } else if (text.rfind("interval:", 0) == 0) {
    char* end = nullptr;
    long long ns = std::strtoll(text.c_str() + 9, &end, 10);
    if (end == text.c_str() + 9 || *end != '\0' || ns <= 0) {
      *error = "bad step rule '" + text + "'";
      return false;
    }
    parsed.kind = StepRule::Kind::kInterval;
    parsed.interval = std::chrono::nanoseconds(ns);
  } else if (text.rfind("on:", 0) == 0 && text.size() > 3) {
    parsed.kind = StepRule::Kind::kOn;
    parsed.name = text.substr(3);
  } else {
    *error = "bad step rule '" + text + "'";
    return false;
  }
  *rule = parsed;
  return true;
}

std::string stepRuleText(const StepRule& rule) {
  switch (rule.kind) {
    case StepRule::Kind::kAuto:
      return "auto";
    case StepRule::Kind::kInterval:
      return "interval:" + std::to_string(rule.interval.count());
    case StepRule::Kind::kOn:
      return "on:" + rule.name;
  }
  return "auto";
}

std::optional<std::string> stepRuleFromFlags(const std::optional<std::string>& interval,
                                             const std::optional<std::string>& step_on,
                                             std::string* error) {
  if (interval && step_on) {
    *error = "--interval and --step-on choose the steps two ways: give one";
    return std::nullopt;
  }
  if (interval) {
    std::optional<std::int64_t> ns = common::parseDurationNs(*interval);
    if (!ns) {
      *error = "--interval '" + *interval +
               "': expected a duration from 1ms to 24h such as 250ms, 2s or 1m";
      return std::nullopt;
    }
    return "interval:" + std::to_string(*ns);
  }
  if (step_on) {
    if (step_on->empty()) {
      *error = "--step-on needs the name of an op, TorchScript function or named region";
      return std::nullopt;
    }
    return "on:" + *step_on;
  }
  return std::string("auto");
}

}  // namespace memseal::inject
