// `memseal fit CASE.so`: runs the case's sized_step at a few sizes, fits peak tensor memory
// against size (phase by phase) and predicts the largest size that fits a budget; --verify runs
// that size and, when the prediction misses, searches the largest size that fits by measuring.
// Exit: 0 an answer (the prediction, verified when asked, or the size the search measured to fit),
// 1 no answer, 2 usage, load or run error.
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "cli/case_loader.h"
#include "cli/command_list.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "memseal/explain.h"

namespace memseal::cli {

namespace {

constexpr int kExitNoAnswer = 1;  // no prediction, or verification found no size that fits

struct FitCommandOptions {
  std::string case_path;
  std::string sizes = "1,2,4,8";
  std::string budget;
  double margin = 0.10;
  bool verify = false;
  std::uint32_t warmup = 1;
  std::string memory = "host";
  OutputFlags output;
};

std::optional<std::vector<std::int64_t>> parseSizes(const std::string& text) {
  std::vector<std::int64_t> sizes;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    try {
      std::size_t used = 0;
      long long size = std::stoll(item, &used);
      if (used != item.size() || size <= 0) return std::nullopt;
      sizes.push_back(size);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (sizes.empty()) return std::nullopt;
  return sizes;
}

int runFit(const FitCommandOptions& options) {
  FitOptions fit;
  std::optional<std::vector<std::int64_t>> sizes = parseSizes(options.sizes);
  if (!sizes) {
    std::cerr << "memseal fit: --sizes '" << options.sizes
              << "': expected positive integers separated by commas, e.g. 1,2,4,8\n";
    return kExitUsage;
  }
  fit.sizes = *sizes;
  if (!options.budget.empty()) {
    fit.budget_bytes = parseByteSize(options.budget);
    if (!fit.budget_bytes) {
      std::cerr << "memseal fit: --budget '" << options.budget
                << "': expected a positive size such as 16GiB, 512MiB or 1000000\n";
      return kExitUsage;
    }
  }
  fit.margin = options.margin;
  fit.verify = options.verify;
  fit.warmup_steps = options.warmup;
  std::optional<int> device = parseFitMemory(options.memory);
  if (!device) {
    std::cerr << "memseal fit: --memory '" << options.memory
              << "': expected host, cuda or cuda:N\n";
    return kExitUsage;
  }
  fit.device = *device;
  if (fit.sizes.size() < 3) {
    std::cerr << "memseal fit: --sizes needs at least three sizes to extrapolate (got "
              << fit.sizes.size() << ")\n";
    return kExitUsage;
  }
  if (!(fit.margin >= 0 && fit.margin < 1)) {
    std::cerr << "memseal fit: --margin " << fit.margin << ": expected a fraction in [0, 1)\n";
    return kExitUsage;
  }
  if (!options.output.check("fit")) {
    return kExitUsage;
  }
  LoadedCase loaded;
  std::string error;
  if (!loadCase(options.case_path, &loaded, &error, CaseEntry::kSizedStep)) {
    std::cerr << "memseal fit: " << error << "\n";
    return kExitUsage;
  }
  FitReport report;
  try {
    if (loaded.setup != nullptr) loaded.setup();
    report = fitCapacity([&](std::int64_t size, int i) { loaded.sized_step(size, i); }, fit);
  } catch (const std::exception& failure) {
    std::cerr << "memseal fit: " << failure.what() << "\n";
    return kExitUsage;
  }
  if (fit.budget_bytes) report.budget_source = "--budget";
  std::cout << report.toText();
  if (!options.output.json_path.empty() &&
      !writeOutput("fit", options.output.json_path, report.toJson())) {
    return kExitUsage;
  }
  if (!writeHtmlIfAsked("fit", options.output.html_path, options.case_path,
                        HtmlPage{"", nullptr, nullptr, &report, ""})) {
    return kExitUsage;
  }
  return report.largestSize() ? kExitOk : kExitNoAnswer;
}

}  // namespace

void addFitCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<FitCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "fit",
      "Fit peak tensor memory against batch size or sequence length and predict the largest "
      "size that fits a budget (exit 0: an answer, 1: none, 2: error)");
  command
      ->add_option("case", options->case_path,
                   "Shared library exporting extern \"C\" void sized_step(std::int64_t size, int "
                   "step), optionally setup()")
      ->required();
  command->add_option("--sizes", options->sizes,
                      "Sizes to measure, comma-separated, at least three (default 1,2,4,8)");
  command->add_option("--budget", options->budget,
                      "Memory budget, e.g. 16GiB (default: available memory plus what is "
                      "tracked now)");
  command->add_option("--margin", options->margin,
                      "Fraction of the budget kept free (default 0.10)");
  command->add_flag("--verify", options->verify,
                    "Measure the predicted size; when the prediction misses, search the largest "
                    "size that fits by measuring");
  command->add_option("--warmup", options->warmup,
                      "Steps run at each size before the measured one (default 1)");
  command->add_option("--memory", options->memory,
                      "What must fit: host (tensor memory, phase by phase; the default) or cuda:N "
                      "(what the CUDA caching allocator reserves there; default budget: the "
                      "device memory this process could have)");
  options->output.addTo(command, "Write the fit as JSON (memseal.fit/2)");
  entries.push_back({command, [options] { return runFit(*options); }});
}

}  // namespace memseal::cli
