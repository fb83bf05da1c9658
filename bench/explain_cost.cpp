// What explaining costs (issue: "Measure"): a training step (MLP + Adam, CPU) plain, under the
// tracker explain starts (stacks on, every op watched), with the allocation trace on top (what
// --memory-viz adds), and explainPeak per measured step (trace, backward observer, replay and
// analysis) — as ratios to the plain step, interleaved in one run. Then the sizes of what is
// written: the HTML page per 1,000 checked steps, and the memory_viz pickle per 10^5 allocations.
#include <torch/torch.h>

#include <cstdio>

#include "interleaved.h"
#include "memseal/explain.h"
#include "memseal/leak_detector.h"

namespace {

struct Training {
  torch::nn::Sequential model{torch::nn::Linear(256, 512), torch::nn::ReLU(),
                              torch::nn::Linear(512, 512), torch::nn::ReLU(),
                              torch::nn::Linear(512, 10)};
  torch::optim::Adam optimizer{model->parameters(), 1e-3};
  void step() {
    optimizer.zero_grad();
    model->forward(torch::randn({64, 256})).pow(2).mean().backward();
    optimizer.step();
  }
};

memseal::TrackerOptions explainTracker() {
  memseal::TrackerOptions options;
  options.stacks = memseal::StackMode::kOn;
  options.watch_ops = memseal::OpWatching::everyStep();
  return options;
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  Training training;
  std::optional<memseal::Tracker> tracker;
  std::optional<memseal::MemoryTrace> trace;
  constexpr int kStepsPerExplain = 4;
  std::vector<memseal::bench::Variant> variants = {
      {"plain step", nullptr, [&] { training.step(); }, nullptr},
      {"tracker (stacks on, all ops)",
       [&] {
         tracker.emplace(explainTracker());
         tracker->start();
       },
       [&] { training.step(); }, [&] { tracker.reset(); }},
      {"tracker + allocation trace",
       [&] {
         tracker.emplace(explainTracker());
         tracker->start();
         trace.emplace(std::size_t{1} << 20);
         trace->start();
       },
       [&] { training.step(); },
       [&] {
         trace.reset();
         tracker.reset();
       }},
      {"explainPeak, per measured step", nullptr,
       [&] {
         memseal::ExplainOptions options;
         options.steps = kStepsPerExplain;
         options.warmup = 0;
         options.roles = [&] { return memseal::RoleTensors{training.model->parameters(), {}, {}}; };
         (void)memseal::explainPeak([&](int) { training.step(); }, options);
       },
       nullptr},
  };
  std::vector<double> ms = memseal::bench::runInterleaved(
      "training step (MLP 256-512-512-10, "
      "batch 64, Adam), ms per iteration",
      variants, 7, 12);
  std::printf("explainPeak per measured step: %.2fx the plain step\n",
              ms[3] / kStepsPerExplain / ms[0]);

  // Sizes: the HTML page of a 1,000-step check, and the pickle of 10^5 allocations.
  memseal::DetectorOptions detector;
  detector.steps = 1000;
  detector.warmup = 5;
  detector.on_leak = memseal::ReportPolicy::kNone;
  std::vector<torch::Tensor> kept;
  memseal::LeakReport report = memseal::check(
      [&](int i) {
        training.step();
        if (i % 2 == 0) kept.push_back(torch::randn({16}));
      },
      detector);
  memseal::HtmlPage page;
  page.title = "1000 steps";
  page.check = &report;
  std::printf("HTML page of a 1,000-step check (%zu findings): %zu bytes; JSON: %zu bytes\n",
              report.findings.size(), memseal::renderHtml(page).size(), report.toJson().size());

  memseal::Tracker counting;
  counting.start();
  memseal::MemoryTrace allocations(200000);
  allocations.start();
  std::int64_t first = counting.stats().allocations_total;
  while (counting.stats().allocations_total - first < 100000) training.step();
  allocations.stop();
  std::string pickle = allocations.memoryVizPickle();
  std::printf(
      "memory_viz pickle: %zu bytes for %llu allocations and %llu frees (%.1f bytes per "
      "allocation and its free)\n",
      pickle.size(), static_cast<unsigned long long>(allocations.allocations()),
      static_cast<unsigned long long>(allocations.frees()),
      static_cast<double>(pickle.size()) / static_cast<double>(allocations.allocations()));
  return 0;
}
