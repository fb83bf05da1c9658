// An inference server with no memseal code in it, for `memseal run` (tests, demo, benchmark). It
// reads one request per line of stdin (the batch size), or makes --requests of them itself with
// batch sizes 1..8, serves each with a small MLP on --workers threads, and writes one line per
// response to stdout. --leak chooses a bug of the kind people report:
//   history   every output is kept in a list "for metrics" (tensors retained);
//   grad      requests run with autograd on and outputs are kept (each holds its graph);
//   none      healthy (the default).
// --announce N prints "served N" after every N requests (tests use it to know the server is busy);
// --exit-code sets the exit status; --timing 1 prints the request loop's time to stderr, and
// --timing-blocks N the time of every N requests after it (kept in memory, printed at the end, so
// a benchmark can compare the loop's undisturbed stretches). No sleeps: requests run back to back.
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  std::string leak = "none";
  long requests = -1;  // -1: read them from stdin
  int workers = 1;
  long announce = 0;
  int exit_code = 0;
  int hidden = 256;
  bool timing = false;    // --timing 1: the request loop's wall time on stderr (the benchmark)
  long timing_block = 0;  // --timing-blocks N: also the time of every N requests
};

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int hidden)
      : first(register_module("first", torch::nn::Linear(64, hidden))),
        second(register_module("second", torch::nn::Linear(hidden, hidden))),
        head(register_module("head", torch::nn::Linear(hidden, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::relu(second(torch::relu(first(x)))));
  }
  torch::nn::Linear first, second, head;
};
TORCH_MODULE(Mlp);

class RequestSource {
 public:
  explicit RequestSource(long count) : left_(count) {}
  // The next request's batch size, or nothing at the end of the stream.
  std::optional<long> next() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (left_ >= 0) {
      if (left_ == 0) return std::nullopt;
      --left_;
      return 1 + (made_++ % 8);
    }
    std::string line;
    while (std::getline(std::cin, line)) {
      long batch = std::strtol(line.c_str(), nullptr, 10);
      if (batch > 0) return batch;
    }
    return std::nullopt;
  }

 private:
  std::mutex mutex_;
  long left_;
  long made_ = 0;
};

int parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "inference_server: " << flag << " needs a value\n";
      return 2;
    }
    std::string value = argv[++i];
    if (flag == "--leak") {
      options.leak = value;
    } else if (flag == "--requests") {
      options.requests = std::atol(value.c_str());
    } else if (flag == "--workers") {
      options.workers = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--announce") {
      options.announce = std::atol(value.c_str());
    } else if (flag == "--exit-code") {
      options.exit_code = std::atoi(value.c_str());
    } else if (flag == "--timing") {
      options.timing = value == "1";
    } else if (flag == "--timing-blocks") {
      options.timing_block = std::atol(value.c_str());
      if (options.timing_block <= 0) {
        std::cerr << "inference_server: --timing-blocks needs a positive number of requests\n";
        return 2;
      }
    } else if (flag == "--hidden") {
      options.hidden = std::max(1, std::atoi(value.c_str()));
    } else {
      std::cerr << "inference_server: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (options.leak != "none" && options.leak != "history" && options.leak != "grad") {
    std::cerr << "inference_server: --leak is none, history or grad\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (int error = parse(argc, argv, options)) return error;
  torch::manual_seed(0);
  at::set_num_threads(1);
  Mlp model(options.hidden);
  model->eval();
  for (auto& parameter : model->parameters()) parameter.requires_grad_(options.leak == "grad");
  RequestSource source(options.requests);
  std::mutex history_mutex;
  std::vector<torch::Tensor> history;  // the bug of --leak history / grad
  std::atomic<long> served{0};
  std::mutex output_mutex;
  using Clock = std::chrono::steady_clock;
  // --timing-blocks: when each block's last request ended.
  std::vector<Clock::time_point> block_ends;
  if (options.timing_block > 0 && options.requests > 0) {
    block_ends.reserve(static_cast<std::size_t>(options.requests / options.timing_block) + 1);
  }

  auto serve = [&] {
    while (auto batch = source.next()) {
      torch::Tensor output;
      {
        std::optional<torch::NoGradGuard> no_grad;
        if (options.leak != "grad") no_grad.emplace();
        torch::Tensor input = torch::randn({*batch, 64});
        output = model->forward(input).softmax(1);
      }
      double score = output.max().item<double>();
      if (options.leak != "none") {
        std::lock_guard<std::mutex> lock(history_mutex);
        history.push_back(output);
      }
      long count = ++served;
      std::lock_guard<std::mutex> lock(output_mutex);
      if (options.timing_block > 0 && count % options.timing_block == 0) {
        block_ends.push_back(Clock::now());
      }
      std::printf("response %ld batch %ld score %.4f\n", count, *batch, score);
      if (options.announce > 0 && count % options.announce == 0) {
        std::printf("served %ld\n", count);
        std::fflush(stdout);
      }
    }
  };
  auto started = Clock::now();
  std::vector<std::thread> workers;
  for (int i = 1; i < options.workers; ++i) workers.emplace_back(serve);
  serve();
  for (std::thread& worker : workers) worker.join();
  if (options.timing) {
    std::chrono::duration<double, std::milli> loop = Clock::now() - started;
    std::fprintf(stderr, "request loop: %ld requests in %.1f ms\n", served.load(), loop.count());
  }
  Clock::time_point block_start = started;
  for (Clock::time_point block_end : block_ends) {
    std::chrono::duration<double, std::milli> block = block_end - block_start;
    std::fprintf(stderr, "request block: %ld requests in %.3f ms\n", options.timing_block,
                 block.count());
    block_start = block_end;
  }
  std::fflush(stdout);
  return options.exit_code;
}
