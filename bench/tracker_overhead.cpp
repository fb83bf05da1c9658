// Tracker and leak-detector overhead on the core issue's two loops, on versus off in the same run,
// plus the tracker's own memory per live allocation and the detector's latency on a scalar leak.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "interleaved.h"
#include "loops/example_loops.h"
#include "memseal/leak_detector.h"
#include "memseal/tracker.h"
#include "models/example_models.h"
#include "track/live_table.h"
#include "track/stack_capture.h"

using namespace memseal;

namespace {

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

// The iteration with setStep before it, so every variant pays for numbering steps alike.
std::function<void()> steppedIteration(const std::function<void()>& iteration) {
  auto step = std::make_shared<std::uint32_t>(0);
  return [iteration, step] {
    setStep((*step)++);
    iteration();
  };
}

std::vector<bench::Variant> trackerVariants(const std::function<void()>& iteration, bool detector) {
  auto tracker = std::make_shared<std::unique_ptr<Tracker>>();
  auto detect = std::make_shared<std::unique_ptr<LeakDetector>>();
  auto withTracker = [&, tracker](const std::string& name, TrackerOptions options,
                                  track::Unwinder unwinder = track::Unwinder::kLibunwind) {
    return bench::Variant{name,
                          [tracker, options, unwinder] {
                            track::selectUnwinder(unwinder);
                            *tracker = std::make_unique<Tracker>(options);
                            (*tracker)->start();
                          },
                          steppedIteration(iteration), [tracker] { tracker->reset(); }};
  };
  // A detector made in the untimed set-up, which also runs `untimed_steps` steps of the loop.
  auto withDetector = [&, detect](const std::string& name, DetectorOptions options,
                                  int untimed_steps) {
    return bench::Variant{name,
                          [detect, options, iteration, untimed_steps] {
                            track::selectUnwinder(track::Unwinder::kLibunwind);
                            *detect = std::make_unique<LeakDetector>(options);
                            for (int i = 0; i < untimed_steps; ++i) {
                              iteration();
                              (*detect)->step();
                            }
                          },
                          [iteration, detect] {
                            iteration();
                            (*detect)->step();
                          },
                          [detect] {
                            (*detect)->finish();
                            detect->reset();
                          }};
  };
  auto tracked = [](StackMode stacks, OpWatching ops) {
    TrackerOptions options;
    options.stacks = stacks;
    options.watch_ops = ops;
    return options;
  };
  std::vector<bench::Variant> variants;
  variants.push_back({"off", nullptr, steppedIteration(iteration), nullptr});
  if (!detector) {
    variants.push_back(
        withTracker("tracker, stacks off", tracked(StackMode::kOff, OpWatching::everyStep())));
    TrackerOptions no_metadata = tracked(StackMode::kOff, OpWatching::everyStep());
    no_metadata.record_tensor_metadata = false;
    variants.push_back(withTracker("tracker, stacks off, no metadata", no_metadata));
    variants.push_back(withTracker("tracker, allocations only (ops off)",
                                   tracked(StackMode::kOff, OpWatching::off())));
    for (std::uint32_t every : {8u, 16u}) {
      variants.push_back(withTracker("tracker, stacks off, ops 1 step in " + std::to_string(every),
                                     tracked(StackMode::kOff, OpWatching::oneStepIn(every))));
    }
    variants.push_back(withTracker("tracker, stacks on, ops 1 step in 8",
                                   tracked(StackMode::kOn, OpWatching::oneStepIn(8))));
    variants.push_back(withTracker("tracker, stacks on, ops auto",
                                   tracked(StackMode::kOn, OpWatching::automatic())));
    TrackerOptions sampled = tracked(StackMode::kSampled, OpWatching::everyStep());
    sampled.stack_sample_every = 64;
    variants.push_back(withTracker("tracker, stacks sampled 1/64", sampled));
    // Named by the unwinder actually in use: libunwind falls back to glibc where it is missing.
    std::string unwinder = track::unwinderName(track::selectUnwinder(track::Unwinder::kLibunwind));
    variants.push_back(withTracker("tracker, stacks on, " + unwinder,
                                   tracked(StackMode::kOn, OpWatching::everyStep())));
    variants.push_back(withTracker("tracker, stacks on, glibc backtrace",
                                   tracked(StackMode::kOn, OpWatching::everyStep()),
                                   track::Unwinder::kGlibc));
    return variants;
  }
  struct DetectorVariant {
    std::string name;
    std::optional<StackMode> stacks;  // unset: the detector's default (on)
    std::optional<OpWatching> ops;    // unset: the detector's default (auto)
  };
  for (const DetectorVariant& setting :
       {DetectorVariant{"detector default (stacks on, ops auto)", std::nullopt, std::nullopt},
        DetectorVariant{"detector, stacks off, ops auto", StackMode::kOff, std::nullopt},
        DetectorVariant{"detector, stacks on, ops every step", StackMode::kOn,
                        OpWatching::everyStep()},
        DetectorVariant{"detector, stacks off, ops every step", StackMode::kOff,
                        OpWatching::everyStep()}}) {
    DetectorOptions options;
    options.on_leak = ReportPolicy::kNone;
    // As a user runs it: warm-up, then the verdict's watched steps, then sampling.
    options.warmup = 5;
    options.tracker.stacks = setting.stacks;
    options.tracker.watch_ops = setting.ops;
    variants.push_back(withDetector(setting.name, options, 0));
  }
  // The default detector once a long run is past its watched start: 200 untimed steps first.
  DetectorOptions steady;
  steady.on_leak = ReportPolicy::kNone;
  steady.warmup = 5;
  variants.push_back(withDetector("detector default, after its first 200 steps", steady, 200));
  return variants;
}

bool selected(const char* section) {
  const char* only = std::getenv("MEMSEAL_BENCH_ONLY");  // e.g. "b-detector"
  return only == nullptr || std::string(section).find(only) != std::string::npos;
}

}  // namespace

int main() {
  at::set_num_threads(1);
  torch::manual_seed(0);
  int repetitions = envInt("MEMSEAL_BENCH_REPETITIONS", 15);

  // (a) CPU inference: the conv net under InferenceMode, one intra-op thread.
  examples::ConvNet conv;
  torch::Tensor image = torch::randn({8, 3, 64, 64});
  auto inference = [&] {
    c10::InferenceMode guard;
    torch::Tensor out = conv->forward(image);
  };
  // (b) small-op training: 3-layer MLP, 64 wide, batch 32, Adam.
  auto mlp = examples::makeMlp();
  torch::optim::Adam adam(mlp->parameters(), 1e-3);
  torch::Tensor batch = torch::randn({32, 64});
  torch::Tensor target = torch::randn({32, 10});
  auto training = [&] {
    adam.zero_grad();
    torch::Tensor loss = torch::mse_loss(mlp->forward(batch), target);
    loss.backward();
    adam.step();
  };

  std::printf("memseal tracker benchmark, torch %s, %d intra-op thread\n", TORCH_VERSION,
              at::get_num_threads());
  if (selected("a-tracker")) {
    auto a = trackerVariants(inference, false);
    bench::runInterleaved("(a) conv net inference 8x3x64x64: tracker", a, repetitions, 4);
  }
  if (selected("b-tracker")) {
    auto b = trackerVariants(training, false);
    bench::runInterleaved("(b) MLP training step, Adam: tracker", b, repetitions, 200);
  }
  if (selected("a-detector")) {
    auto da = trackerVariants(inference, true);
    bench::runInterleaved("(a) conv net inference: leak detector, 40 steps from its start", da,
                          repetitions, 40);
  }
  if (selected("b-detector")) {
    auto db = trackerVariants(training, true);
    bench::runInterleaved("(b) MLP training step: leak detector, 400 steps from its start", db,
                          repetitions, 400);
  }
  if (!selected("memory")) return 0;

  // The tracker's own memory per live allocation: live-table slots only (sites and stacks are per
  // distinct site, not per allocation).
  {
    Tracker tracker;
    tracker.start();
    std::size_t before = track::liveAllocations().memoryBytes();
    std::vector<torch::Tensor> alive;
    constexpr int kAlive = 200000;
    alive.reserve(kAlive);
    for (int i = 0; i < kAlive; ++i) alive.push_back(torch::empty({4}));
    std::size_t after = track::liveAllocations().memoryBytes();
    std::printf(
        "\ntracker memory: %zu bytes of live table for %d live allocations = %.1f bytes each "
        "(record %zu bytes, table load 35-70%%)\n",
        after - before, kAlive, static_cast<double>(after - before) / kAlive,
        sizeof(track::LiveRecord));
  }

  // Detection latency: one leaked scalar per step.
  {
    DetectorOptions options;
    options.on_leak = ReportPolicy::kNone;
    options.warmup = 5;
    options.steps = 40;
    LeakReport report = check(examples::exampleLoop("scalar-per-step").make(), options);
    std::printf(
        "\ndetection latency, one scalar leaked per step, warm-up %u: leak clear from step %u "
        "(%u steps after warm-up)\n",
        options.warmup, report.detected_at_step.value_or(0),
        report.detected_at_step.value_or(0) - options.warmup + 1);
  }
  return 0;
}
