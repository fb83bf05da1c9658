// Loops written after the patterns of public bug reports (PyTorch, torchvision and libtorch issue
// threads) that defeat a naive detector: leaks whose tensors change shape every step, leaks on some
// steps only, one mistake that retains many tensors, a graph leak beside a native one, the
// create_graph cycle, slow native growth in a large process; and healthy loops that only look like
// them (bucketed caches, warm-up at new shapes, allocators that oscillate, caches that level off).
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "loops/example_loops.h"

namespace memseal::examples {

namespace {

torch::nn::Sequential makeDeepMlp(int layers) {
  torch::nn::Sequential model;
  for (int i = 0; i < layers; ++i) {
    model->push_back(torch::nn::Linear(64, 64));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::Linear(64, 10));
  return model;
}

torch::nn::Sequential makeSmallMlp() {
  return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 10));
}

// Native memory outside any tensor, touched so that it is resident; freed with the loop's state.
struct NativeBlocks {
  std::vector<char*> blocks;
  ~NativeBlocks() {
    for (char* block : blocks) std::free(block);
  }
  void add(std::size_t bytes) {
    auto* block = static_cast<char*>(std::malloc(bytes));
    if (block == nullptr) return;
    std::memset(block, 1, bytes);
    blocks.push_back(block);
  }
};

// A process that already holds a few hundred MiB, as real training and serving processes do.
std::shared_ptr<std::vector<char>> ballast() {
  return std::make_shared<std::vector<char>>(std::size_t{300} << 20, 1);
}

// One step of second-order training: backward with create_graph=true, then an SGD update. Unless
// `reset_grad`, each parameter's .grad keeps the history that points back at the parameter.
std::function<void(int)> createGraphStep(bool reset_grad) {
  struct State {
    torch::nn::Linear model{16, 16};
    torch::Tensor input = torch::randn({64, 16});
  };
  auto state = std::make_shared<State>();
  return [state, reset_grad](int) {
    torch::Tensor loss = state->model->forward(state->input).pow(2).sum();
    loss.backward({}, std::nullopt, /*create_graph=*/true);
    torch::NoGradGuard no_grad;
    for (torch::Tensor& parameter : state->model->parameters()) {
      parameter.sub_(parameter.grad().detach() * 1e-4);
      if (reset_grad) parameter.mutable_grad().reset();
    }
  };
}

}  // namespace

void addDiagnosisLoops(std::vector<ExampleLoop>& loops) {
  // ---- leaks whose retained tensors have another shape every step ----
  loops.push_back({"cache-by-input-size",
                   "cache[x.size(0)] = encode(x);  // every request its own length",
                   "tensors-retained", false,
                   [] {
                     auto cache = std::make_shared<std::map<std::int64_t, torch::Tensor>>();
                     return [cache](int step) {
                       torch::NoGradGuard no_grad;
                       std::int64_t rows = 16 + step;
                       torch::Tensor x = torch::randn({rows, 32});
                       (*cache)[rows] = x.matmul(x.t()).softmax(1);
                     };
                   },
                   0, false, true});
  loops.push_back({"variable-length-outputs",
                   "results.push_back(model->forward(tokens));  // tokens of 1..61 rows",
                   "tensors-retained", false,
                   [] {
                     auto model = std::make_shared<torch::nn::Sequential>(makeSmallMlp());
                     auto results = std::make_shared<std::vector<torch::Tensor>>();
                     return [model, results](int step) {
                       c10::InferenceMode guard;
                       std::int64_t length = 1 + (step * 7) % 61;
                       results->push_back((*model)->forward(torch::randn({length, 64})));
                     };
                   },
                   0, false, true});
  loops.push_back(
      {"anchors-per-resolution", "anchors[{h, w}] = make_anchors(h, w);  // every image its size",
       "tensors-retained", false,
       [] {
         auto anchors =
             std::make_shared<std::map<std::pair<std::int64_t, std::int64_t>, torch::Tensor>>();
         return [anchors](int step) {
           torch::NoGradGuard no_grad;
           std::int64_t height = 8 + step;
           std::int64_t width = 8 + (step * 5) % 23;
           torch::Tensor ys = torch::arange(height, torch::kFloat).repeat_interleave(width);
           torch::Tensor xs = torch::arange(width, torch::kFloat).repeat({height});
           (*anchors)[{height, width}] = torch::stack({xs, ys, xs + 1, ys + 1}, 1);
         };
       },
       0, false, true});

  // ---- a leak on some steps only: tensor memory grows, no site retains in most steps ----
  loops.push_back({"cache-misses-leak",
                   "if (!cache.count(key)) cache[key] = embed(key);  // every other key is new",
                   "tensors-retained", false, [] {
                     auto cache = std::make_shared<std::map<int, torch::Tensor>>();
                     return [cache](int step) {
                       torch::NoGradGuard no_grad;
                       int key = step % 2 == 0 ? step : 1;
                       if (cache->count(key) == 0) (*cache)[key] = torch::randn({256});
                       torch::Tensor used = (*cache)[key] * 2;
                     };
                   }});

  // ---- one cause that retains many tensors ----
  loops.push_back({"grad-enabled-deep-inference",
                   "outputs.push_back(deep_model->forward(batch));  // 8 layers, grad mode on",
                   "grad-enabled-inference", false, [] {
                     auto model = std::make_shared<torch::nn::Sequential>(makeDeepMlp(8));
                     auto outputs = std::make_shared<std::vector<torch::Tensor>>();
                     return [model, outputs](int) {
                       torch::Tensor batch = torch::randn({16, 64});
                       outputs->push_back((*model)->forward(batch));
                     };
                   }});

  // ---- a graph leak beside a native one ----
  loops.push_back(
      {"graph-and-native-leak",
       "total_loss = total_loss + loss;  log_buffers.emplace_back(256 << 10, 1);",
       "autograd-graph-retained", false,
       [] {
         struct State {
           torch::nn::Sequential model = makeSmallMlp();
           torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(1e-3)};
           torch::Tensor input = torch::randn({32, 64});
           torch::Tensor target = torch::randn({32, 10});
           torch::Tensor total_loss = torch::zeros({});
           NativeBlocks log_buffers;
         };
         auto state = std::make_shared<State>();
         return [state](int) {
           state->optimizer.zero_grad();
           torch::Tensor loss = torch::mse_loss(state->model->forward(state->input), state->target);
           loss.backward();
           state->optimizer.step();
           state->total_loss = state->total_loss + loss;
           state->log_buffers.add(256 << 10);
         };
       },
       0, true});

  // ---- the create_graph cycle: parameter -> .grad -> grad_fn -> ... -> parameter ----
  loops.push_back({"create-graph-cycle",
                   "loss.backward({}, {}, /*create_graph=*/true);  // .grad never reset",
                   "create-graph-cycle", false, [] { return createGraphStep(false); }});
  loops.push_back({"create-graph-with-reset",
                   "loss.backward({}, {}, true); ...; p.mutable_grad().reset();", "", false,
                   [] { return createGraphStep(true); }});

  // ---- slow native growth in a large process, and resident memory that only looks like it ----
  loops.push_back({"slow-native-leak",
                   "handles.push_back(open_native_handle());  // one page per call, 300 MiB held",
                   "untracked-growth", false,
                   [] {
                     auto held = ballast();
                     auto leaked = std::make_shared<NativeBlocks>();
                     leaked->blocks.reserve(4096);
                     return [held, leaked](int) { leaked->add(4096); };
                   },
                   2000, true});
  loops.push_back({"allocator-oscillation",
                   "parse a batch of small objects, a different number every step", "", false,
                   [] {
                     struct State {
                       std::shared_ptr<std::vector<char>> held = ballast();
                       std::vector<std::unique_ptr<char[]>> objects;
                       std::mt19937 random{7};
                     };
                     auto state = std::make_shared<State>();
                     return [state](int) {
                       state->objects.clear();
                       std::size_t count = state->random() % 16384;
                       for (std::size_t i = 0; i < count; ++i) {
                         state->objects.emplace_back(new char[384]);
                         std::memset(state->objects.back().get(), 1, 384);
                       }
                     };
                   },
                   2000, true});
  loops.push_back({"native-cache-levels-off",
                   "kernels[shape] = compile(shape);  // 300 shapes, then every one is known", "",
                   false,
                   [] {
                     struct State {
                       std::shared_ptr<std::vector<char>> held = ballast();
                       std::map<int, std::vector<char>> kernels;
                     };
                     auto state = std::make_shared<State>();
                     return [state](int step) {
                       int shape = step % 300;
                       if (state->kernels.count(shape) == 0) {
                         state->kernels.emplace(shape, std::vector<char>(16 << 10, 1));
                       }
                     };
                   },
                   2000, true});

  // ---- healthy loops at many shapes ----
  loops.push_back({"bucketed-cache", "cache[round_up(x.size(0), 32)] = workspace;  // 4 buckets",
                   "", false, [] {
                     auto cache = std::make_shared<std::map<std::int64_t, torch::Tensor>>();
                     return [cache](int step) {
                       torch::NoGradGuard no_grad;
                       std::int64_t rows = 1 + (step * 37) % 128;
                       std::int64_t bucket = (rows + 31) / 32 * 32;
                       if (cache->count(bucket) == 0) (*cache)[bucket] = torch::zeros({bucket, 64});
                       (*cache)[bucket].narrow(0, 0, rows).copy_(torch::randn({rows, 64}));
                     };
                   }});
  loops.push_back({"workspace-per-shape", "a workspace made at the first sight of each of 6 shapes",
                   "", false, [] {
                     auto workspaces = std::make_shared<std::map<std::int64_t, torch::Tensor>>();
                     return [workspaces](int step) {
                       torch::NoGradGuard no_grad;
                       std::int64_t size = 64 << (step % 6);
                       if (workspaces->count(size) == 0) {
                         (*workspaces)[size] = torch::empty({size});
                       }
                       (*workspaces)[size].uniform_();
                     };
                   }});
  loops.push_back({"conv-variable-image-sizes",
                   "model->forward(image);  // images of 40 sizes, in turn", "", false,
                   [] {
                     auto conv = std::make_shared<torch::nn::Conv2d>(
                         torch::nn::Conv2dOptions(3, 8, 3).padding(1));
                     return [conv](int step) {
                       c10::InferenceMode guard;
                       std::int64_t side = 16 + 2 * (step % 40);
                       torch::Tensor out = (*conv)->forward(torch::randn({1, 3, side, side}));
                     };
                   },
                   200});
}

}  // namespace memseal::examples
