// A whole training program with no memseal code in it, for `memseal run`, shaped like pytorch/
// examples' mnist: epochs of train() then evaluate() on validation data, and a last evaluate() on
// test data. The libtorch twin of examples/scripts/phases.py (its MLP only).
//
//   memseal run -- build/release/examples/phases --leak total-local
//
// Memory that a phase builds up and frees when it ends is not a leak; memory that outlives the
// phase is. --leak chooses a bug, or a healthy pattern that must not be flagged:
//   none         healthy: `total_loss += loss.item<double>()`, reset at each log line (default);
//   total-local  `total_loss += loss` in train()'s locals, never reset: every batch's graph stays
//                alive until train() returns;
//   total-reset  the same, reset at each log line: graphs pile up and are freed every interval;
//   val-grad     evaluate() runs with autograd on and keeps each batch's output, with its graph,
//                for a metric after the loop: freed when evaluate() returns;
//   metrics      healthy: evaluate() keeps each batch's predictions (no history) for the accuracy.
// --epochs, --train-batches, --eval-batches, --log-interval and --batch-size shape the run;
// --inner-steps N runs the hidden layer N times over its own output inside each forward pass (a
// loop inside the step, as a recurrent model's time steps are), and --inner-steps-from M makes
// each pass run from M to N times, a different number each time (as sequences of several lengths
// do); --exit-code sets the exit status.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kFeatures = 32;
constexpr int64_t kClasses = 10;

struct Options {
  std::string leak = "none";
  int epochs = 2;
  int train_batches = 80;
  int eval_batches = 20;
  int log_interval = 20;
  int batch_size = 20;
  int inner_steps = 0;
  int inner_steps_from = -1;
  int exit_code = 0;
};

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t hidden, int inner_steps, int inner_steps_from)
      : first(register_module("first", torch::nn::Linear(kFeatures, hidden))),
        second(register_module("second", torch::nn::Linear(hidden, hidden))),
        head(register_module("head", torch::nn::Linear(hidden, kClasses))),
        inner_steps(inner_steps),
        inner_steps_from(inner_steps_from) {}
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor hidden = torch::relu(second(torch::relu(first(x))));
    int steps = inner_steps;
    if (inner_steps_from >= 0 && inner_steps_from < inner_steps) {
      steps = inner_steps_from + (7 * passes++) % (inner_steps - inner_steps_from + 1);
    }
    for (int step = 0; step < steps; ++step) hidden = torch::tanh(second(hidden));
    return torch::log_softmax(head(hidden), 1);
  }
  torch::nn::Linear first, second, head;
  int inner_steps;
  int inner_steps_from;
  int passes = 0;
};
TORCH_MODULE(Mlp);

struct Batch {
  torch::Tensor data;
  torch::Tensor targets;
};

// `count` batches of synthetic data, labelled by a fixed random teacher so the classifier has
// something to learn.
std::vector<Batch> makeBatches(const Options& options, int count, const torch::Tensor& teacher) {
  torch::Tensor inputs = torch::randn({count * options.batch_size, kFeatures});
  torch::Tensor labels = inputs.matmul(teacher).argmax(1);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    int64_t begin = static_cast<int64_t>(i) * options.batch_size;
    batches.push_back({inputs.slice(0, begin, begin + options.batch_size),
                       labels.slice(0, begin, begin + options.batch_size)});
  }
  return batches;
}

void train(const Options& options, Mlp& model, torch::optim::Optimizer& optimizer,
           const std::vector<Batch>& batches, int epoch) {
  model->train();
  // A running count of right answers, reported at each log line.
  torch::Tensor correct = torch::zeros({}, torch::kLong);
  double total_loss = 0;
  // The total of --leak total-local and total-reset: a tensor that carries every loss's history.
  torch::Tensor total_loss_tensor = torch::zeros({});
  int counted = 0;
  int64_t seen = 0;
  auto started = std::chrono::steady_clock::now();
  for (size_t batch = 0; batch < batches.size(); ++batch) {
    const Batch& current = batches[batch];
    optimizer.zero_grad();
    torch::Tensor output = model->forward(current.data);
    torch::Tensor loss = torch::nll_loss(output, current.targets);
    loss.backward();
    double grad_norm = torch::nn::utils::clip_grad_norm_(model->parameters(), 0.25);
    optimizer.step();

    if (options.leak == "total-local") {
      total_loss_tensor += loss;  // leak: total-local
    } else if (options.leak == "total-reset") {
      total_loss_tensor += loss;  // leak: total-reset
    } else {
      total_loss += loss.item<double>();
    }
    correct += (output.argmax(1) == current.targets).sum();
    ++counted;
    seen += current.targets.numel();

    if ((batch + 1) % options.log_interval == 0) {
      bool tensor_total = options.leak == "total-local" || options.leak == "total-reset";
      double cur_loss = (tensor_total ? total_loss_tensor.item<double>() : total_loss) / counted;
      double ppl = torch::exp(torch::tensor(cur_loss)).item<double>();
      std::chrono::duration<double, std::milli> elapsed =
          std::chrono::steady_clock::now() - started;
      std::printf(
          "| epoch %3d | %5zu/%5zu batches | ms/batch %5.2f | loss %5.2f | ppl %8.2f | acc %5.3f | "
          "grad norm %5.2f\n",
          epoch, batch + 1, batches.size(), elapsed.count() / options.log_interval, cur_loss, ppl,
          static_cast<double>(correct.item<int64_t>()) / seen, grad_norm);
      // --leak total-local keeps its total for the whole epoch: train() returning frees it.
      if (options.leak != "total-local") {
        total_loss = 0;
        total_loss_tensor = torch::zeros({});
        counted = 0;
      }
      correct.zero_();
      seen = 0;
      started = std::chrono::steady_clock::now();
    }
  }
}

// The mean loss and the accuracy over `batches`.
std::pair<double, double> evaluate(const Options& options, Mlp& model,
                                   const std::vector<Batch>& batches) {
  model->eval();
  std::optional<torch::NoGradGuard> no_grad;
  if (options.leak != "val-grad") no_grad.emplace();
  double total_loss = 0;
  int64_t correct = 0;
  int64_t seen = 0;
  // What --leak val-grad and --leak metrics keep for the accuracy after the loop.
  std::vector<torch::Tensor> outputs;
  std::vector<torch::Tensor> kept_targets;
  for (const Batch& current : batches) {
    torch::Tensor output = model->forward(current.data);
    total_loss += torch::nll_loss(output, current.targets).item<double>();
    if (options.leak == "val-grad") {
      outputs.push_back(output);  // leak: val-grad
      kept_targets.push_back(current.targets);
    } else if (options.leak == "metrics") {
      outputs.push_back(output.argmax(1));
      kept_targets.push_back(current.targets);
    } else {
      correct += (output.argmax(1) == current.targets).sum().item<int64_t>();
      seen += current.targets.numel();
    }
  }
  if (!outputs.empty()) {
    torch::Tensor predictions = torch::cat(outputs);
    if (options.leak == "val-grad") predictions = predictions.argmax(1);
    torch::Tensor labels = torch::cat(kept_targets);
    correct = (predictions == labels).sum().item<int64_t>();
    seen = labels.numel();
  }
  return {total_loss / batches.size(), static_cast<double>(correct) / seen};
}

int parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "phases: " << flag << " needs a value\n";
      return 2;
    }
    std::string value = argv[++i];
    int number = std::atoi(value.c_str());
    if (flag == "--leak") {
      options.leak = value;
    } else if (flag == "--epochs") {
      options.epochs = std::max(0, number);
    } else if (flag == "--train-batches") {
      options.train_batches = std::max(1, number);
    } else if (flag == "--eval-batches") {
      options.eval_batches = std::max(1, number);
    } else if (flag == "--log-interval") {
      options.log_interval = std::max(1, number);
    } else if (flag == "--batch-size") {
      options.batch_size = std::max(1, number);
    } else if (flag == "--inner-steps") {
      options.inner_steps = std::max(0, number);
    } else if (flag == "--inner-steps-from") {
      options.inner_steps_from = std::max(0, number);
    } else if (flag == "--exit-code") {
      options.exit_code = number;
    } else {
      std::cerr << "phases: unknown flag " << flag << "\n";
      return 2;
    }
  }
  for (const char* leak : {"none", "total-local", "total-reset", "val-grad", "metrics"}) {
    if (options.leak == leak) return 0;
  }
  std::cerr << "phases: --leak is none, total-local, total-reset, val-grad or metrics\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (int error = parse(argc, argv, options)) return error;
  torch::manual_seed(0);
  torch::Tensor teacher = torch::randn({kFeatures, kClasses});
  std::vector<Batch> train_data = makeBatches(options, options.train_batches, teacher);
  std::vector<Batch> val_data = makeBatches(options, options.eval_batches, teacher);
  std::vector<Batch> test_data = makeBatches(options, options.eval_batches, teacher);
  Mlp model(128, options.inner_steps, options.inner_steps_from);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.7);

  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    auto epoch_started = std::chrono::steady_clock::now();
    train(options, model, optimizer, train_data, epoch);
    auto [val_loss, val_accuracy] = evaluate(options, model, val_data);
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - epoch_started;
    std::printf("| end of epoch %3d | time %5.2fs | valid loss %5.2f | valid acc %5.3f\n", epoch,
                elapsed.count(), val_loss, val_accuracy);
    scheduler.step();
  }
  auto [test_loss, test_accuracy] = evaluate(options, model, test_data);
  std::printf("| end of training | mlp | leak %s | test loss %5.2f | test acc %5.3f\n",
              options.leak.c_str(), test_loss, test_accuracy);
  std::fflush(stdout);
  return options.exit_code;
}
