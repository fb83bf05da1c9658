// `memseal whatif SNAPSHOT [--setting CONF]... [--device-memory BYTES] [--json]`: replays the
// allocations of a CUDA memory snapshot's trace through memseal's model of PyTorch's caching
// allocator under the run's own settings and under each setting given (memseal/whatif.h), and
// prints what each would have reserved and whether it would have run out of memory. Exit 0, or 2
// with what is wrong.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "cli/command_list.h"
#include "cli/commands.h"
#include "common/text.h"
#include "memseal/whatif.h"

namespace memseal::cli {

namespace {

struct WhatIfArgs {
  std::string path;
  std::string device_memory;
  WhatIfOptions options;
  bool json = false;
};

int runWhatIf(WhatIfArgs args) {
  std::ifstream file(args.path, std::ios::binary);
  if (!file) {
    std::cerr << "memseal whatif: cannot read " << args.path << "\n";
    return kExitUsage;
  }
  if (!args.device_memory.empty()) {
    std::optional<std::int64_t> bytes = common::parseByteSize(args.device_memory);
    if (!bytes) {
      std::cerr << "memseal whatif: --device-memory: '" << args.device_memory
                << "' is not a size (80GiB, 81559MiB)\n";
      return kExitUsage;
    }
    args.options.device_bytes = static_cast<std::uint64_t>(*bytes);
  }
  std::stringstream content;
  content << file.rdbuf();
  try {
    WhatIfReport report = whatIfSnapshot(content.str(), args.path, args.options);
    std::cout << (args.json ? report.toJson() : report.toText());
    return kExitOk;
  } catch (const std::invalid_argument& error) {
    std::cerr << "memseal whatif: " << args.path << ": " << error.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace

void addWhatIfCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto args = std::make_shared<WhatIfArgs>();
  CLI::App* command = app.add_subcommand(
      "whatif",
      "Replay a CUDA memory snapshot's allocations under other caching-allocator settings: the "
      "reserved peak with each, and whether it runs out of memory (exit 0, 2: unreadable)");
  command
      ->add_option("snapshot", args->path,
                   "A pickle of torch.cuda.memory._dump_snapshot (after _record_memory_history), "
                   "or memseal's --memory-viz file")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option(
      "--setting", args->options.settings,
      "A setting to try, as PYTORCH_CUDA_ALLOC_CONF says it "
      "(expandable_segments:True); repeat for more. Default: "
      "expandable_segments:True, max_split_size_mb:128, roundup_power2_divisions:4");
  command->add_option("--device-memory", args->device_memory,
                      "The device memory the run may take (80GiB); default: what the allocator "
                      "reserved at the recorded out-of-memory error and the device's free memory "
                      "then, else unlimited");
  command->add_option("--device", args->options.device,
                      "The device whose trace to replay (default: the first with allocations)");
  command->add_flag("--json", args->json, "Print memseal.whatif/1 JSON instead of text");
  entries.push_back({command, [args] { return runWhatIf(*args); }});
}

}  // namespace memseal::cli
