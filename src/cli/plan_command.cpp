// `memseal plan MODEL.pt --input 8x3x64x64`: records one inference of a TorchScript model under
// the planned arena and reports how large the pre-allocated block must be, per input shape.
#include <torch/script.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/command_list.h"
#include "cli/commands.h"
#include "common/text.h"
#include "memseal/arena.h"

namespace memseal::cli {

namespace {

struct PlanOptions {
  std::string model_path;
  std::vector<std::string> inputs;
  std::vector<std::int64_t> batches;
};

std::vector<std::int64_t> parseShape(const std::string& text) {
  std::vector<std::int64_t> shape;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, 'x')) {
    std::size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
    }
    if (part.empty() || used != part.size() || value <= 0) {
      throw CLI::ValidationError("--input", "'" + text + "' is not a shape like 8x3x64x64");
    }
    shape.push_back(value);
  }
  if (shape.empty()) throw CLI::ValidationError("--input", "empty shape");
  return shape;
}

// TorchScript errors end with the sentence that says what went wrong.
std::string lastLine(const std::string& text) {
  std::stringstream lines(text);
  std::string line;
  std::string last;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  return last;
}

// The CLI sees only libmemseal's public API, so it formats sizes itself.
std::string mebibytes(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

int runPlan(const PlanOptions& options) {
  std::vector<std::vector<std::int64_t>> shapes;
  for (const std::string& input : options.inputs) shapes.push_back(parseShape(input));
  torch::jit::Module module;
  try {
    module = torch::jit::load(options.model_path);
  } catch (const std::exception& error) {
    std::string what = error.what();
    std::cerr << "memseal plan: cannot load " << options.model_path
              << " as a TorchScript model: " << what.substr(0, what.find('\n')) << "\n";
    return kExitUsage;
  }
  module.eval();
  c10::InferenceMode inference;
  std::vector<std::int64_t> batches = options.batches;
  if (batches.empty()) batches.push_back(0);  // 0: the shapes as given
  PlannedArena arena;
  std::printf("memseal plan %s\n", options.model_path.c_str());
  std::printf("  %-28s %12s %12s %8s %14s %9s %s\n", "inputs", "block", "lower bound", "ratio",
              "without reuse", "planned", "outputs");
  for (std::int64_t batch : batches) {
    std::vector<at::Tensor> tensors;
    std::string described;
    for (std::vector<std::int64_t> shape : shapes) {
      if (batch > 0) shape[0] = batch;
      tensors.push_back(torch::randn(shape));
      described += (described.empty() ? "" : " ") + common::shapeText(shape);
    }
    std::vector<c10::IValue> arguments(tensors.begin(), tensors.end());
    std::string key = PlannedArena::keyFor(tensors);
    c10::IValue output;  // kept past the region, as a caller keeps results: not planned
    try {
      arena.run(key, [&] { output = module.forward(arguments); });
    } catch (const std::exception& error) {
      std::cerr << "memseal plan: the model failed on inputs " << described << ": "
                << lastLine(error.what()) << "\n";
      return kExitUsage;
    }
    std::optional<ArenaPlanSummary> plan = arena.plan(key);
    if (!plan) {
      std::cerr << "memseal plan: no plan for " << described << "\n";
      return kExitUsage;
    }
    double ratio =
        plan->lower_bound > 0 ? static_cast<double>(plan->block_bytes) / plan->lower_bound : 1.0;
    std::printf("  %-28s %12s %12s %7.3fx %14s %9zu %zu\n", described.c_str(),
                mebibytes(plan->block_bytes).c_str(), mebibytes(plan->lower_bound).c_str(), ratio,
                mebibytes(plan->naive_sum).c_str(), plan->planned_allocations,
                plan->escaping_allocations);
  }
  std::printf(
      "  block: one pre-allocated region per concurrent session; outputs come from the "
      "normal allocator\n");
  return kExitOk;
}

}  // namespace

void addPlanCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand(
      "plan", "Size the planned arena for a TorchScript model: block bytes per input shape");
  command->add_option("model", options->model_path, "TorchScript file (torch.jit.save)")
      ->required()
      ->check(CLI::ExistingFile);
  command
      ->add_option("--input", options->inputs,
                   "Shape of one model input, e.g. 8x3x64x64 (repeat per input)")
      ->required();
  command
      ->add_option("--batch", options->batches,
                   "Plan again with the first dimension of every input set to each of these")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  entries.push_back({command, [options] { return runPlan(*options); }});
}

}  // namespace memseal::cli
