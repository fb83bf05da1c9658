// An inference server that allocates nothing in steady state: worker threads serve requests of
// variable batch size (1..32 rows of 64 features) with a small MLP (or, with --image N, 1..32
// images of 3xNxN with a small convolutional net, whose activations grow as N^2), taking input and
// output tensors from a memseal::TensorPool (buckets 1/2/4/8/16/32), uploading the request through
// memseal::HostStaging and running the model in a memseal::PlannedArena (one plan per batch size).
// After a warm-up that serves every batch size once per worker, each worker serves the rest under a
// memseal::NoAllocationScope and prints what it counted.
//
//   pooled_server [--mode pooled|plain] [--workers N] [--requests N] [--batch N] [--image N]
//   [--watch 0|1]
//                 [--leak none|lease] [--on-exhausted wait|grow|fail]
//
// --mode plain serves the same requests with per-request tensors (the usual code), for the
// benchmark (bench/pool_server.sh, which also runs it under tcmalloc). --watch 1 runs a
// memseal::LeakDetector over the server (a step every 8 requests of the first worker) and prints
// its verdict; --leak lease is the bug it must find: each request's input lease is kept "for a
// retry" and never dropped. Exit status: 0, 2 on bad flags, 3 on a leak, 4 on steady-state
// allocations in pooled mode, 1 when a request fails (a pool exhausted by policy).
#include <torch/torch.h>

#include <sys/resource.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "memseal/arena.h"
#include "memseal/leak_detector.h"
#include "memseal/pool.h"
#include "memseal/scope.h"
#include "memseal/staging.h"

namespace {

constexpr std::int64_t kFeatures = 64;  // of the MLP's requests
constexpr std::int64_t kClasses = 10;
constexpr std::int64_t kMaxBatch = 32;

struct Options {
  std::string mode = "pooled";
  int workers = 1;
  long requests = 2000;
  bool watch = false;
  std::string leak = "none";
  std::int64_t batch = 0;  // 0: batch sizes vary over 1..32; else every request has this many
  std::int64_t image = 0;  // 0: the MLP; else the side of the convolutional net's images
  memseal::PoolExhaustion on_exhausted = memseal::PoolExhaustion::kWait;
};

// One request item's shape and the model that classifies a batch of them.
struct Model {
  std::vector<std::int64_t> item_shape;
  torch::nn::Sequential layers;
  std::int64_t itemElements() const {
    std::int64_t elements = 1;
    for (std::int64_t size : item_shape) elements *= size;
    return elements;
  }
  std::vector<std::int64_t> batchShape(std::int64_t batch) const {
    std::vector<std::int64_t> shape{batch};
    shape.insert(shape.end(), item_shape.begin(), item_shape.end());
    return shape;
  }
  torch::Tensor forward(const torch::Tensor& batch) { return layers->forward(batch).softmax(1); }
};

Model makeModel(std::int64_t image) {
  namespace nn = torch::nn;
  if (image == 0) {
    return {{kFeatures},
            nn::Sequential(nn::Linear(kFeatures, 256), nn::ReLU(), nn::Linear(256, 256), nn::ReLU(),
                           nn::Linear(256, kClasses))};
  }
  return {{3, image, image},
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 16, 3).padding(1)), nn::ReLU(),
                         nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1)), nn::ReLU(),
                         nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(16, kClasses))};
}

// Batch sizes 1..32 from a fixed sequence per worker, the first 32 covering every size once.
std::int64_t batchOf(long index, int worker) {
  if (index < kMaxBatch) return 1 + index;
  std::uint64_t x = static_cast<std::uint64_t>(index) * 6364136223846793005ULL +
                    static_cast<std::uint64_t>(worker) * 1442695040888963407ULL;
  return 1 + static_cast<std::int64_t>((x >> 33) % kMaxBatch);
}

// What a response sends back: a checksum of the probabilities, read without tensor ops.
double checksum(const torch::Tensor& probabilities) {
  const float* data = probabilities.data_ptr<float>();
  double sum = 0;
  for (std::int64_t i = 0; i < probabilities.numel(); ++i)
    sum += data[i] * static_cast<double>(i % 7);
  return sum;
}

int parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "pooled_server: " << flag << " needs a value\n";
      return 2;
    }
    std::string value = argv[++i];
    if (flag == "--mode" && (value == "pooled" || value == "plain")) {
      options.mode = value;
    } else if (flag == "--workers" && std::atoi(value.c_str()) > 0) {
      options.workers = std::atoi(value.c_str());
    } else if (flag == "--requests" && std::atol(value.c_str()) > 0) {
      options.requests = std::atol(value.c_str());
    } else if (flag == "--batch" && std::atol(value.c_str()) >= 0 &&
               std::atol(value.c_str()) <= kMaxBatch) {
      options.batch = std::atol(value.c_str());
    } else if (flag == "--image" && std::atol(value.c_str()) >= 0) {
      options.image = std::atol(value.c_str());
    } else if (flag == "--watch" && (value == "0" || value == "1")) {
      options.watch = value == "1";
    } else if (flag == "--leak" && (value == "none" || value == "lease")) {
      options.leak = value;
    } else if (flag == "--on-exhausted" && value == "wait") {
      options.on_exhausted = memseal::PoolExhaustion::kWait;
    } else if (flag == "--on-exhausted" && value == "grow") {
      options.on_exhausted = memseal::PoolExhaustion::kGrow;
    } else if (flag == "--on-exhausted" && value == "fail") {
      options.on_exhausted = memseal::PoolExhaustion::kFail;
    } else {
      std::cerr << "pooled_server: bad flag or value: " << flag << " " << value
                << " (see the comment at the top of examples/server/pooled_server.cpp)\n";
      return 2;
    }
  }
  return 0;
}

struct WorkerResult {
  std::vector<std::int64_t> latencies_ns;  // of the steady-state requests
  std::int64_t steady_allocations = 0;
  std::int64_t steady_page_faults = 0;  // minor faults of the worker's thread in steady state
  double checksum = 0;
};

std::int64_t threadPageFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (int error = parse(argc, argv, options)) return error;
  torch::manual_seed(0);
  at::set_num_threads(1);
  Model model = makeModel(options.image);
  model.layers->eval();
  bool pooled = options.mode == "pooled";

  std::unique_ptr<memseal::TensorPool> pool;
  if (pooled) {
    auto bucketed = [&](const char* name, std::vector<std::int64_t> item_shape) {
      memseal::TensorClassOptions tensor_class;
      tensor_class.name = name;
      tensor_class.sizes = {{1, 2, 4, 8, 16, 32}};
      for (std::int64_t size : item_shape) tensor_class.sizes.push_back({size});
      tensor_class.capacity = static_cast<std::size_t>(options.workers);
      tensor_class.on_exhausted = options.on_exhausted;
      return tensor_class;
    };
    pool = std::make_unique<memseal::TensorPool>(std::vector<memseal::TensorClassOptions>{
        bucketed("input", model.item_shape), bucketed("output", {kClasses})});
  }
  memseal::ArenaOptions arena_options;
  // One plan per batch size: 32 of them. With --image 128 they need about 1 GiB in all, and a plan
  // evicted for lack of room would be recorded again (allocating) on its next use.
  arena_options.max_bytes = std::size_t{4} << 30;
  memseal::PlannedArena arena(arena_options);
  std::optional<memseal::LeakDetector> detector;
  if (options.watch) {
    memseal::DetectorOptions detector_options;
    detector_options.on_leak = memseal::ReportPolicy::kNone;
    detector.emplace(detector_options);
  }
  std::mutex kept_mutex;
  std::vector<memseal::TensorLease> kept_for_retry;  // the bug of --leak lease

  std::atomic<long> next_request{0};
  std::vector<WorkerResult> results(static_cast<std::size_t>(options.workers));
  auto serveRequests = [&](int worker) {
    c10::InferenceMode inference;
    WorkerResult& result = results[static_cast<std::size_t>(worker)];
    result.latencies_ns.reserve(static_cast<std::size_t>(options.requests));
    // Where a request's bytes arrive.
    std::vector<float> payload(static_cast<std::size_t>(kMaxBatch * model.itemElements()));
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<float>(i % 13) / 13;
    std::optional<memseal::HostStaging> staging;
    if (pooled) staging.emplace(payload.size() * sizeof(float));
    auto handle = [&](long index) {
      std::int64_t batch =
          options.batch > 0 && index >= kMaxBatch ? options.batch : batchOf(index, worker);
      std::vector<std::int64_t> shape = model.batchShape(batch);
      torch::Tensor request = torch::from_blob(payload.data(), shape);
      if (!pooled) {
        torch::Tensor input = request.clone();
        result.checksum += checksum(model.forward(input));
        return;
      }
      memseal::TensorLease input = pool->acquire("input", shape);
      memseal::TensorLease output = pool->acquire("output", {batch, kClasses});
      staging->upload(request, *input);
      arena.run({*input}, [&] { output->copy_(model.forward(*input)); });
      result.checksum += checksum(*output);
      if (options.leak == "lease") {
        std::lock_guard<std::mutex> lock(kept_mutex);
        kept_for_retry.push_back(std::move(input));
      }
    };
    long served = 0;
    // Warm-up: every batch size once, so every arena plan is recorded.
    for (long index = 0; index < kMaxBatch; ++index) handle(index);
    std::optional<memseal::NoAllocationScope> steady;
    if (pooled) steady.emplace();
    std::int64_t faults_before = threadPageFaults();
    for (long index = next_request++; index < options.requests; index = next_request++) {
      auto started = std::chrono::steady_clock::now();
      handle(kMaxBatch + index);
      result.latencies_ns.push_back((std::chrono::steady_clock::now() - started).count());
      if (detector && worker == 0 && ++served % 8 == 0) detector->step();
    }
    result.steady_page_faults = threadPageFaults() - faults_before;
    if (steady) result.steady_allocations = steady->allocations();
  };
  std::mutex error_mutex;
  std::string first_error;  // a worker's exception ends the server with status 1
  auto serve = [&](int worker) {
    try {
      serveRequests(worker);
    } catch (const std::exception& error) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_error.empty()) first_error = error.what();
      next_request = options.requests;  // the other workers stop too
    }
  };
  auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int worker = 1; worker < options.workers; ++worker) threads.emplace_back(serve, worker);
  serve(0);
  for (std::thread& thread : threads) thread.join();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!first_error.empty()) {
    std::cerr << "pooled_server: " << first_error << "\n";
    return 1;
  }

  std::vector<std::int64_t> latencies;
  std::int64_t steady_allocations = 0;
  std::int64_t steady_page_faults = 0;
  double total = 0;
  for (const WorkerResult& result : results) {
    latencies.insert(latencies.end(), result.latencies_ns.begin(), result.latencies_ns.end());
    steady_allocations += result.steady_allocations;
    steady_page_faults += result.steady_page_faults;
    total += result.checksum;
  }
  std::sort(latencies.begin(), latencies.end());
  auto percentile = [&](double p) {
    if (latencies.empty()) return 0.0;
    std::size_t at = std::min(latencies.size() - 1, static_cast<std::size_t>(p * latencies.size()));
    return static_cast<double>(latencies[at]) / 1000.0;
  };
  std::printf("mode %s workers %d requests %zu: %.0f requests/s, p50 %.1f us, p99 %.1f us\n",
              options.mode.c_str(), options.workers, latencies.size(),
              static_cast<double>(latencies.size()) / seconds, percentile(0.50), percentile(0.99));
  std::printf("checksum %.3f\n", total);
  std::printf("steady-state page faults: %lld\n", static_cast<long long>(steady_page_faults));
  int status = 0;
  if (pooled) {
    std::printf("steady-state allocations: %lld\n", static_cast<long long>(steady_allocations));
    std::printf("%s", pool->stats().toText().c_str());
    memseal::ArenaStats arena_stats = arena.stats();
    std::printf("arena: %lld plans recorded, %lld replays, %lld fallback allocations\n",
                static_cast<long long>(arena_stats.recordings),
                static_cast<long long>(arena_stats.replays),
                static_cast<long long>(arena_stats.fallback_allocations));
    if (steady_allocations > 0) status = 4;
  }
  if (detector) {
    memseal::LeakReport report = detector->finish();
    if (report.leak) {
      std::printf("leak found:\n%s", report.toText().c_str());
      status = 3;
    } else {
      std::printf("leak: none in %u steps\n", report.steps);
    }
  }
  std::fflush(stdout);
  return status;
}
