// `memseal demo`: built-in loops, each run under memseal and printed with what it found.
#include <torch/torch.h>

#include <iostream>

#include "cli/command_list.h"
#include "cli/commands.h"
#include "memseal/tracker.h"

namespace memseal::cli {

void addDemoCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  CLI::App* demo =
      app.add_subcommand("demo", "Run built-in leaky and healthy loops and explain them");
  entries.push_back({demo, [] {
                       torch::manual_seed(0);
                       torch::nn::Sequential model(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                                                   torch::nn::Linear(64, 10));
                       torch::optim::Adam optimizer(model->parameters(), 1e-3);
                       Tracker tracker(TrackerOptions{StackMode::kOn});
                       tracker.start();
                       for (int step = 0; step < 5; ++step) {
                         setStep(static_cast<std::uint32_t>(step));
                         optimizer.zero_grad();
                         auto loss = model->forward(torch::randn({32, 64})).pow(2).mean();
                         loss.backward();
                         optimizer.step();
                       }
                       Snapshot snapshot = tracker.snapshot();
                       std::cout << "live " << snapshot.cpu.live_bytes << " bytes in "
                                 << snapshot.cpu.live_count << " allocations, peak "
                                 << snapshot.cpu.peak_bytes << "\n";
                       for (const SiteSnapshot& site : snapshot.sites) {
                         std::cout << site.site.op << " (" << site.site.outer_op << ") "
                                   << site.live_bytes << " bytes\n";
                       }
                       return kExitOk;
                     }});
}

}  // namespace memseal::cli
