// Any text as the value of every tracker option (the one grammar of MEMSEAL_* variables, `memseal
// check` flags and Python keywords), as an option's name, as a byte size (`memseal fit --budget`,
// memseal.parse_byte_size), and as `memseal run --interval` / `--step-on`. What must hold: a
// value is taken or refused with std::invalid_argument and nothing else, and what was taken says
// itself back the same way; a byte size or a duration is in its range and reads back whole; the
// step rule the launcher makes from any flags reaches the program's runtime unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/text.h"
#include "inject/step_rule.h"
#include "memseal/tracker.h"

namespace {

void checkTrackerOption(const std::string& name, const std::string& value) {
  memseal::TrackerOptions options;
  try {
    options.set(name, value);
  } catch (const std::invalid_argument&) {
    return;
  }
  if (options.watch_ops) {
    memseal::TrackerOptions again;
    again.set(name, options.watch_ops->text());
    if (again.watch_ops != options.watch_ops) std::abort();
  }
}

void checkByteSize(const std::string& text) {
  std::optional<std::int64_t> bytes = memseal::common::parseByteSize(text);
  if (!bytes) return;
  if (*bytes < 1) std::abort();
  if (memseal::common::parseByteSize(std::to_string(*bytes)) != bytes) std::abort();
}

void checkDuration(const std::string& text) {
  std::optional<std::int64_t> ns = memseal::common::parseDurationNs(text);
  if (ns && (*ns < 1000000 || *ns > 86400LL * 1000000000)) std::abort();
}

// The launcher's text for these flags, read back by the runtime, says the same rule.
void checkStepFlags(const std::optional<std::string>& interval,
                    const std::optional<std::string>& step_on) {
  std::string error;
  std::optional<std::string> text = memseal::inject::stepRuleFromFlags(interval, step_on, &error);
  if (!text) {
    if (error.empty()) std::abort();
    return;
  }
  memseal::inject::StepRule rule;
  if (!memseal::inject::parseStepRule(*text, &rule, &error)) std::abort();
  if (memseal::inject::stepRuleText(rule) != *text) std::abort();
  if (step_on && (rule.kind != memseal::inject::StepRule::Kind::kOn || rule.name != *step_on)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  // A command line's or the environment's values end at the first NUL.
  std::string text = bytes.substr(0, bytes.find('\0'));
  for (const char* name : {"stacks", "watch_ops", "watch-ops", "observe_ops", "tensor_metadata"}) {
    checkTrackerOption(name, text);
  }
  checkTrackerOption(text, "on");
  checkByteSize(text);
  checkDuration(text);
  checkStepFlags(text, std::nullopt);
  checkStepFlags(std::nullopt, text);
  checkStepFlags(text, text);
  std::string runtime_error;
  memseal::inject::StepRule rule;
  if (memseal::inject::parseStepRule(text, &rule, &runtime_error)) {
    memseal::inject::StepRule again;
    if (!memseal::inject::parseStepRule(memseal::inject::stepRuleText(rule), &again,
                                        &runtime_error) ||
        memseal::inject::stepRuleText(again) != memseal::inject::stepRuleText(rule)) {
      std::abort();
    }
  }
  return 0;
}
