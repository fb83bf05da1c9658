// The one grammar of the tracker's options. The environment, `memseal check` and the Python module
// all go through TrackerOptions::set, so a spelling works everywhere or nowhere.
#include <cctype>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "memseal/tracker.h"

namespace memseal {

namespace {

struct OptionName {
  const char* name;      // as set() takes it
  const char* variable;  // in the environment
  const char* expected;  // the values it accepts, for messages
  // The option's former name and variable, still read (deprecated); null where it had none.
  const char* former_name;
  const char* former_variable;
};

constexpr OptionName kOptions[] = {
    {"stacks", "MEMSEAL_STACKS", "off, on, python or sample:N", nullptr, nullptr},
    {"tensor_metadata", "MEMSEAL_TENSOR_METADATA", "on, off, 1 or 0", nullptr, nullptr},
    {"watch_ops", "MEMSEAL_WATCH_OPS", "all, off, every:N or auto", "observe_ops",
     "MEMSEAL_OBSERVE_OPS"},
};

// "watch-ops", "watch_ops" and the former "observe_ops" name the same option.
std::string canonicalName(std::string name) {
  for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::tolower(c));
  for (const OptionName& option : kOptions) {
    if (option.former_name != nullptr && name == option.former_name) return option.name;
  }
  return name;
}

const OptionName* findOption(const std::string& name) {
  for (const OptionName& option : kOptions) {
    if (canonicalName(name) == option.name) return &option;
  }
  return nullptr;
}

// N of "<prefix>N", N a positive 32-bit decimal integer; nothing when `value` has another form.
std::optional<std::uint32_t> countAfterPrefix(const std::string& value, const std::string& prefix) {
  if (value.rfind(prefix, 0) != 0) return std::nullopt;
  std::string digits = value.substr(prefix.size());
  if (digits.empty() || digits.size() > 10 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  unsigned long long count = std::stoull(digits);  // at most 10 digits: cannot overflow
  if (count == 0 || count > UINT32_MAX) return std::nullopt;
  return static_cast<std::uint32_t>(count);
}

// False when `value` is not one of the option's spellings.
bool apply(TrackerOptions& options, const OptionName& option, const std::string& value) {
  std::string name = option.name;
  if (name == "stacks") {
    if (value == "off") {
      options.stacks = StackMode::kOff;
    } else if (value == "on") {
      options.stacks = StackMode::kOn;
    } else if (value == "python") {
      options.stacks = StackMode::kPython;
    } else if (std::optional<std::uint32_t> every = countAfterPrefix(value, "sample:")) {
      options.stacks = StackMode::kSampled;
      options.stack_sample_every = *every;
    } else {
      return false;
    }
    return true;
  }
  if (name == "tensor_metadata") {
    if (value != "on" && value != "off" && value != "1" && value != "0") return false;
    options.record_tensor_metadata = value == "on" || value == "1";
    return true;
  }
  if (value == "all") {
    options.watch_ops = OpWatching::everyStep();
  } else if (value == "off") {
    options.watch_ops = OpWatching::off();
  } else if (value == "auto") {
    options.watch_ops = OpWatching::automatic();
  } else if (std::optional<std::uint32_t> every = countAfterPrefix(value, "every:")) {
    options.watch_ops = OpWatching::oneStepIn(*every);
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string OpWatching::text() const {
  switch (mode) {
    case Mode::kOff:
      return "off";
    case Mode::kEveryStep:
      return "all";
    case Mode::kOneStepIn:
      return "every:" + std::to_string(every);
    case Mode::kAuto:
      return "auto";
  }
  return "";
}

void TrackerOptions::set(const std::string& name, const std::string& value) {
  const OptionName* option = findOption(name);
  if (option == nullptr) {
    throw std::invalid_argument("memseal: no tracker option named '" + name +
                                "' (stacks, tensor_metadata, watch_ops)");
  }
  if (!apply(*this, *option, value)) {
    throw std::invalid_argument(std::string(option->name) + "=" + value + ": expected " +
                                option->expected);
  }
}

std::string TrackerOptions::expectedValues(const std::string& name) {
  const OptionName* option = findOption(name);
  return option != nullptr ? option->expected : "";
}

std::string TrackerOptions::environmentVariable(const std::string& name) {
  const OptionName* option = findOption(name);
  return option != nullptr ? option->variable : "";
}

TrackerOptions TrackerOptions::fromEnvironment() {
  TrackerOptions options;
  for (const OptionName& option : kOptions) {
    const char* variable = option.variable;
    const char* value = std::getenv(variable);
    if ((value == nullptr || *value == '\0') && option.former_variable != nullptr) {
      variable = option.former_variable;
      value = std::getenv(variable);
    }
    if (value == nullptr || *value == '\0') continue;  // empty: as if unset
    if (!apply(options, option, value)) {
      throw std::invalid_argument(std::string(variable) + "=" + value + ": expected " +
                                  option.expected);
    }
  }
  return options;
}

TrackerOptions TrackerOptions::resolved() const { return resolved(TrackerOptions()); }

TrackerOptions TrackerOptions::resolved(const TrackerOptions& defaults) const {
  TrackerOptions environment = fromEnvironment();
  TrackerOptions result;
  // A stack mode and its sampling rate come together from wherever the mode comes from.
  const TrackerOptions& stacks_from =
      stacks ? *this : (environment.stacks ? environment : defaults);
  result.stacks = stacks_from.stacks.value_or(StackMode::kOff);
  result.stack_sample_every =
      stack_sample_every ? *stack_sample_every : stacks_from.stack_sample_every.value_or(64);
  result.record_tensor_metadata = record_tensor_metadata
                                      ? *record_tensor_metadata
                                      : environment.record_tensor_metadata.value_or(
                                            defaults.record_tensor_metadata.value_or(true));
  // The field's former name, still read where the new one is unset (deprecated).
  const std::optional<OpWatching>& chosen_ops = watch_ops ? watch_ops : observe_ops;
  const std::optional<OpWatching>& default_ops =
      defaults.watch_ops ? defaults.watch_ops : defaults.observe_ops;
  result.watch_ops =
      chosen_ops ? *chosen_ops
                 : environment.watch_ops.value_or(default_ops.value_or(OpWatching::everyStep()));
  if (*result.stack_sample_every == 0) {
    throw std::invalid_argument("memseal: stack_sample_every must be at least 1");
  }
  OpWatching::Mode mode = result.watch_ops->mode;
  if ((mode == OpWatching::Mode::kOneStepIn || mode == OpWatching::Mode::kAuto) &&
      result.watch_ops->every == 0) {
    throw std::invalid_argument(
        "memseal: ops watched on one step in 0: use OpWatching::oneStepIn(N) with N >= 1 "
        "(1: every step), or OpWatching::off()");
  }
  result.observe_ops = result.watch_ops;  // for code that still reads the former name
  return result;
}

}  // namespace memseal
