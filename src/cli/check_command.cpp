// `memseal check CASE.so`: loads a shared library exporting `extern "C" void step(int)` (and
// optionally `setup()`), runs it under the leak detector, prints the report and writes JSON.
// Exit: 0 no leak, 1 leak, 2 usage or load error.
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include "cli/case_loader.h"
#include "cli/command_list.h"
#include "cli/commands.h"
#include "memseal/leak_detector.h"

namespace memseal::cli {

namespace {

struct CheckOptions {
  std::string case_path;
  std::uint32_t steps = 30;
  std::uint32_t warmup = 5;
  std::string json_path;
  // Tracker options as the user spelled them; unset ones come from the environment, then from
  // the detector's defaults (TrackerOptions::resolved).
  std::optional<std::string> stacks;
  std::optional<std::string> observe_ops;
  std::optional<std::string> tensor_metadata;
  bool quiet = false;
};

// Sets one tracker option from its flag, in the one grammar TrackerOptions::set reads.
void setTrackerOption(TrackerOptions& tracker, const char* name, const char* flag,
                      const std::optional<std::string>& value) {
  if (!value) return;
  try {
    tracker.set(name, *value);
  } catch (const std::invalid_argument&) {
    throw CLI::ValidationError(
        flag, "'" + *value + "': expected " + TrackerOptions::expectedValues(name));
  }
}

// Writes beside the target and renames, so a failed write never leaves half a file.
bool writeFileAtomically(const std::string& path, const std::string& content) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << content;
    if (!out) {
      std::cerr << "memseal check: cannot write " << temporary << "\n";
      std::remove(temporary.c_str());
      return false;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::cerr << "memseal check: cannot write " << path << "\n";
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

int runCheck(const CheckOptions& options) {
  if (options.steps <= options.warmup + 3) {
    std::cerr << "memseal check: --steps (" << options.steps << ") must exceed --warmup ("
              << options.warmup << ") + 3, to tell growth from noise\n";
    return kExitUsage;
  }
  DetectorOptions detector;
  detector.steps = options.steps;
  detector.warmup = options.warmup;
  detector.on_leak = LeakPolicy::kNone;
  setTrackerOption(detector.tracker, "stacks", "--stacks", options.stacks);
  setTrackerOption(detector.tracker, "observe_ops", "--observe-ops", options.observe_ops);
  setTrackerOption(detector.tracker, "tensor_metadata", "--tensor-metadata",
                   options.tensor_metadata);
  // The environment is read now, so a bad MEMSEAL_* value stops us before the case runs.
  try {
    detector.tracker.resolved();
  } catch (const std::invalid_argument& error) {
    std::cerr << "memseal check: " << error.what() << "\n";
    return kExitUsage;
  }
  // Refuse to overwrite a directory or write where we cannot, before running anything.
  if (!options.json_path.empty()) {
    struct stat info {};
    if (stat(options.json_path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      std::cerr << "memseal check: --json " << options.json_path << " is a directory\n";
      return kExitUsage;
    }
  }
  LoadedCase loaded;
  std::string error;
  if (!loadCase(options.case_path, &loaded, &error)) {
    std::cerr << "memseal check: " << error << "\n";
    return kExitUsage;
  }
  if (loaded.setup != nullptr) loaded.setup();
  LeakReport report = check([&](int i) { loaded.step(i); }, detector);
  if (!options.quiet || report.leak) std::cout << report.toText();
  if (!options.json_path.empty() && !writeFileAtomically(options.json_path, report.toJson())) {
    return kExitUsage;
  }
  return report.leak ? kExitLeak : kExitOk;
}

}  // namespace

void addCheckCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* command = app.add_subcommand("check",
                                         "Run a loop from a shared library under the leak detector "
                                         "(exit 0: no leak, 1: leak, 2: error)");
  command
      ->add_option("case", options->case_path,
                   "Shared library exporting extern \"C\" void step(int) and optionally setup()")
      ->required();
  command->add_option("--steps", options->steps, "Steps to run, warm-up included (default 30)")
      ->check(CLI::Range(1u, 10000000u));
  command->add_option("--warmup", options->warmup, "Warm-up steps never blamed (default 5)");
  command->add_option("--json", options->json_path, "Write the report as JSON (memseal.check/1)");
  command->add_option("--stacks", options->stacks,
                      "Native stacks: on, off or sample:N (default on; env MEMSEAL_STACKS)");
  command->add_option("--observe-ops", options->observe_ops,
                      "Steps whose ops are watched: all, off, every:N, or auto (default: every "
                      "step until the loop repeats itself, then one in 16; env "
                      "MEMSEAL_OBSERVE_OPS)");
  command->add_option("--tensor-metadata", options->tensor_metadata,
                      "Read shape, dtype and grad_fn of new tensors: on or off (default on; env "
                      "MEMSEAL_TENSOR_METADATA)");
  command->add_flag("--quiet", options->quiet, "Print the report only when a leak is found");
  entries.push_back({command, [options] { return runCheck(*options); }});
}

}  // namespace memseal::cli
