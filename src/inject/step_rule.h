// The rule that ends a step in a program run by `memseal run` (step_source.h says what each
// does): made by the launcher from --interval / --step-on, handed to the program's runtime as text
// in MEMSEAL_RUN_STEP. Plain text and numbers, no libtorch: the fuzz target fuzz_options checks
// that whatever the flags say either is refused with a message or reaches the runtime unchanged.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace memseal::inject {

struct StepRule {
  enum class Kind { kAuto, kInterval, kOn };
  Kind kind = Kind::kAuto;
  std::chrono::nanoseconds interval{0};
  std::string name;
};

// "auto", "interval:NANOSECONDS" or "on:NAME" (what the launcher writes in MEMSEAL_RUN_STEP).
bool parseStepRule(const std::string& text, StepRule* rule, std::string* error);
std::string stepRuleText(const StepRule& rule);

// The rule's text from the launcher's flags (neither: "auto"), or nullopt with `error` saying what
// is wrong: both given, an interval that is not a duration from 1 ms to 24 h, an empty name.
std::optional<std::string> stepRuleFromFlags(const std::optional<std::string>& interval,
                                             const std::optional<std::string>& step_on,
                                             std::string* error);

}  // namespace memseal::inject
