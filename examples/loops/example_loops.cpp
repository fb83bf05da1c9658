// Each loop is the smallest program that shows its pattern with real libtorch training or
// inference: a 3-layer MLP, 64 wide, batch 32, as in the core benchmark.
#include "loops/example_loops.h"

#include <torch/torch.h>

#include <deque>
#include <list>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>
#include <unordered_map>

namespace memseal::examples {

namespace {

torch::nn::Sequential makeMlp() {
  return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 10));
}

struct Training {
  torch::nn::Sequential model = makeMlp();
  torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(1e-3)};
  torch::Tensor input = torch::randn({32, 64});
  torch::Tensor target = torch::randn({32, 10});

  torch::Tensor trainStep() {
    optimizer.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(input), target);
    loss.backward();
    optimizer.step();
    return loss;
  }
};

std::vector<ExampleLoop> buildLoops() {
  std::vector<ExampleLoop> loops;

  // ---- leaks ----
  loops.push_back(
      {"accumulating-loss", "total_loss = total_loss + loss;", "autograd-graph-retained", true, [] {
         auto state = std::make_shared<Training>();
         auto total_loss = std::make_shared<torch::Tensor>(torch::zeros({}));
         return [state, total_loss](int) {
           torch::Tensor loss = state->trainStep();
           *total_loss = *total_loss + loss;
         };
       }});
  loops.push_back({"loss-vector", "losses.push_back(loss);", "autograd-graph-retained", true, [] {
                     auto state = std::make_shared<Training>();
                     auto losses = std::make_shared<std::vector<torch::Tensor>>();
                     return [state, losses](int) { losses->push_back(state->trainStep()); };
                   }});
  loops.push_back({"modules-per-step", "heads.push_back(torch::nn::Linear(64, 64));",
                   "parameters-created-per-step", true, [] {
                     auto heads = std::make_shared<std::vector<torch::nn::Linear>>();
                     auto input = std::make_shared<torch::Tensor>(torch::randn({32, 64}));
                     return [heads, input](int) {
                       torch::nn::Linear head(64, 64);
                       heads->push_back(head);
                       torch::NoGradGuard no_grad;
                       head->forward(*input);
                     };
                   }});
  loops.push_back({"grad-enabled-inference", "outputs.push_back(model->forward(batch));",
                   "grad-enabled-inference", true, [] {
                     auto model = std::make_shared<torch::nn::Sequential>(makeMlp());
                     auto outputs = std::make_shared<std::vector<torch::Tensor>>();
                     return [model, outputs](int) {
                       torch::Tensor batch = torch::randn({32, 64});
                       outputs->push_back((*model)->forward(batch));
                     };
                   }});
  loops.push_back(
      {"unbounded-cache", "cache[request_id] = features(x);", "tensors-retained", true, [] {
         auto cache = std::make_shared<std::unordered_map<int, torch::Tensor>>();
         return [cache](int step) {
           torch::NoGradGuard no_grad;
           torch::Tensor x = torch::randn({16, 64});
           (*cache)[step] = x.matmul(x.t()).softmax(1);
         };
       }});
  loops.push_back(
      {"scalar-per-step", "history.push_back(metric.sum());", "tensors-retained", false, [] {
         auto history = std::make_shared<std::vector<torch::Tensor>>();
         auto metric = std::make_shared<torch::Tensor>(torch::rand({8}));
         return [history, metric](int) { history->push_back(metric->sum()); };
       }});
  loops.push_back({"untracked-growth", "log_buffers.emplace_back(1 << 20, 1);", "untracked-growth",
                   false,
                   [] {
                     auto buffers = std::make_shared<std::vector<std::vector<char>>>();
                     return [buffers](int) { buffers->emplace_back(1 << 20, 1); };
                   },
                   0, true});

  // ---- healthy: memory rises, then levels off ----
  loops.push_back(
      {"training-with-adam", "optimizer.step();  // Adam's state is made at step 0", "", true, [] {
         auto state = std::make_shared<Training>();
         auto total = std::make_shared<float>(0);
         return [state, total](int) { *total += state->trainStep().item<float>(); };
       }});
  loops.push_back(
      {"bounded-cache", "cache.put(key, value);  // evicts beyond 4 entries", "", true, [] {
         struct Lru {
           std::list<int> order;
           std::map<int, torch::Tensor> values;
         };
         auto cache = std::make_shared<Lru>();
         return [cache](int step) {
           torch::NoGradGuard no_grad;
           cache->values[step] = torch::randn({16, 64});
           cache->order.push_back(step);
           if (cache->order.size() > 4) {
             cache->values.erase(cache->order.front());
             cache->order.pop_front();
           }
         };
       }});
  loops.push_back({"warmup-workspace", "static workspace made on first use", "", false, [] {
                     auto workspace = std::make_shared<torch::Tensor>();
                     return [workspace](int step) {
                       torch::NoGradGuard no_grad;
                       if (step >= 2 && !workspace->defined()) *workspace = torch::empty({4096});
                       torch::Tensor x = torch::randn({64, 64});
                       if (workspace->defined()) workspace->narrow(0, 0, 4096).copy_(x.flatten());
                     };
                   }});
  loops.push_back({"gradient-accumulation", "zero_grad() every 4 steps", "", false, [] {
                     auto state = std::make_shared<Training>();
                     return [state](int step) {
                       torch::Tensor loss =
                           torch::mse_loss(state->model->forward(state->input), state->target) / 4;
                       loss.backward();
                       if (step % 4 == 3) {
                         state->optimizer.step();
                         state->optimizer.zero_grad();
                       }
                     };
                   }});
  loops.push_back(
      {"variable-batch-size", "batch of 1..64 rows", "", false, [] {
         auto state = std::make_shared<Training>();
         return [state](int step) {
           std::int64_t rows = 1 + (step * 37) % 64;
           state->optimizer.zero_grad();
           torch::Tensor loss = state->model->forward(torch::randn({rows, 64})).pow(2).mean();
           loss.backward();
           state->optimizer.step();
         };
       }});
  loops.push_back(
      {"freed-on-another-thread", "a consumer thread drops each step's tensors", "", false, [] {
         return [](int) {
           torch::NoGradGuard no_grad;
           auto batch = std::make_shared<torch::Tensor>(torch::randn({128, 64}));
           std::thread consumer([moved = std::move(batch)]() mutable { moved.reset(); });
           consumer.join();
         };
       }});
  loops.push_back(
      {"inference-mode", "c10::InferenceMode guard; last = model->forward(batch);", "", false, [] {
         auto model = std::make_shared<torch::nn::Sequential>(makeMlp());
         auto last = std::make_shared<torch::Tensor>();
         return [model, last](int) {
           c10::InferenceMode guard;
           *last = (*model)->forward(torch::randn({32, 64}));
         };
       }});
  addDiagnosisLoops(loops);
  return loops;
}

}  // namespace

const std::vector<ExampleLoop>& exampleLoops() {
  static const std::vector<ExampleLoop> loops = buildLoops();
  return loops;
}

const ExampleLoop& exampleLoop(const std::string& name) {
  for (const ExampleLoop& loop : exampleLoops()) {
    if (loop.name == name) return loop;
  }
  throw std::out_of_range("no example loop named '" + name + "'");
}

}  // namespace memseal::examples
