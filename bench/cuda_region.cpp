// The GPU's planned memory against PyTorch's own ways, on one CUDA device: inference of an MLP
// (batch 64) through the caching allocator as it is, through memseal::CudaRegion (a private pool
// per key), and as a CUDA graph replayed from its private pool; and the cost of one allocation
// with and without the region; then uploads of host batches feeding a small model: a pageable
// tensor copied on the compute stream, memseal::HostStaging (pinned) on the same stream, and
// HostStaging on a copy stream of its own so the next batch's copy overlaps this one's compute.
// Interleaved rounds, medians. Prints tables for BENCHMARKS.md; exits 0 with a line saying so where
// no CUDA device is present.
//
//   build/release/bench/memseal_bench_cuda_region [ROUNDS] [ITERATIONS]
#include <torch/torch.h>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "memseal/cuda_region.h"
#include "memseal/staging.h"

namespace {

using Clock = std::chrono::steady_clock;

struct DeviceNumbers {
  std::int64_t segments = 0;  // cudaMalloc'ed so far
  std::int64_t reserved = 0;  // bytes now
};

DeviceNumbers deviceNumbers() {
  using c10::CachingAllocator::StatType;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  auto all = static_cast<std::size_t>(StatType::AGGREGATE);
  return {stats.segment[all].allocated, stats.reserved_bytes[all].current};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Result {
  std::vector<double> us_per_iteration;
  std::int64_t steady_segments = 0;  // cudaMallocs during the timed loops
  std::int64_t held_bytes = 0;       // reserved memory the set-up added
};

template <typename Step>
double timeLoop(int iterations, Step&& step, Result& result) {
  DeviceNumbers before = deviceNumbers();
  torch::cuda::synchronize();
  Clock::time_point start = Clock::now();
  for (int i = 0; i < iterations; ++i) step();
  torch::cuda::synchronize();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iterations;
  result.steady_segments += deviceNumbers().segments - before.segments;
  return us;
}

// Host batches to the device and through a small model, three ways; µs per batch, medians.
void uploadBenchmark(int rounds, int iterations) {
  torch::NoGradGuard no_grad;
  constexpr std::int64_t kRows = 1024, kWidth = 1024;  // 4 MiB of float per batch
  torch::nn::Sequential model(torch::nn::Linear(kWidth, 4 * kWidth), torch::nn::GELU(),
                              torch::nn::Linear(4 * kWidth, kWidth));
  model->to(torch::kCUDA);
  std::vector<torch::Tensor> batches;  // pageable host memory, as a data loader hands it over
  for (int i = 0; i < 4; ++i) batches.push_back(torch::randn({kRows, kWidth}));
  std::size_t batch_bytes = static_cast<std::size_t>(kRows * kWidth) * sizeof(float);
  std::vector<torch::Tensor> device_inputs = {torch::empty({kRows, kWidth}, torch::kCUDA),
                                              torch::empty({kRows, kWidth}, torch::kCUDA)};
  at::cuda::CUDAStream compute = at::cuda::getCurrentCUDAStream();
  at::cuda::CUDAStream copy_stream = at::cuda::getStreamFromPool();
  memseal::HostStaging same_stream_staging(batch_bytes, 2);
  memseal::HostStaging overlapped_staging(batch_bytes, 2);
  torch::Tensor sink;

  auto pageable = [&] {
    for (int i = 0; i < iterations; ++i) {
      device_inputs[0].copy_(batches[i % batches.size()]);
      sink = model->forward(device_inputs[0]);
    }
  };
  auto staged = [&] {
    for (int i = 0; i < iterations; ++i) {
      same_stream_staging.upload(batches[i % batches.size()], device_inputs[0]);
      sink = model->forward(device_inputs[0]);
    }
  };
  // Batch i+1 is copied on the copy stream while batch i is computed; each device buffer is
  // written again only once the compute that read it is done.
  auto overlapped = [&] {
    at::cuda::CUDAEvent copied[2], consumed[2];
    overlapped_staging.upload(batches[0], device_inputs[0], copy_stream);
    copied[0].record(copy_stream);
    for (int i = 0; i < iterations; ++i) {
      int current = i % 2, next = 1 - current;
      if (i + 1 < iterations) {
        if (consumed[next].isCreated()) consumed[next].block(copy_stream);
        overlapped_staging.upload(batches[(i + 1) % batches.size()], device_inputs[next],
                                  copy_stream);
        copied[next].record(copy_stream);
      }
      copied[current].block(compute);
      sink = model->forward(device_inputs[current]);
      consumed[current].record(compute);
    }
  };
  std::vector<double> times[3];
  auto timed = [&](auto&& loop) {
    torch::cuda::synchronize();
    Clock::time_point start = Clock::now();
    loop();
    torch::cuda::synchronize();
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iterations;
  };
  pageable();  // warm-up: kernels chosen, staging buffers pinned
  staged();
  overlapped();
  for (int round = 0; round < rounds; ++round) {
    times[0].push_back(timed(pageable));
    times[1].push_back(timed(staged));
    times[2].push_back(timed(overlapped));
  }
  std::printf(
      "\nuploads: %lld x %lld float batches (4 MiB, pageable host memory) into an MLP "
      "%lld-%lld-%lld, %d rounds x %d batches\n"
      "| upload | us/batch (median) | vs pageable copy |\n|---|---|---|\n",
      static_cast<long long>(kRows), static_cast<long long>(kWidth), static_cast<long long>(kWidth),
      static_cast<long long>(4 * kWidth), static_cast<long long>(kWidth), rounds, iterations);
  const char* names[3] = {"pageable tensor, copy_ on the compute stream",
                          "HostStaging (pinned), the compute stream",
                          "HostStaging (pinned), own copy stream, overlapped"};
  for (int way = 0; way < 3; ++way) {
    std::printf("| %s | %.1f | %.3fx |\n", names[way], median(times[way]),
                median(times[way]) / median(times[0]));
  }
  memseal::HostStagingStats stats = overlapped_staging.stats();
  std::printf("overlapped staging: pinned %s, %lld uploads, %lld waited for their buffer's copy\n",
              overlapped_staging.pinned() ? "yes" : "no", static_cast<long long>(stats.uploads),
              static_cast<long long>(stats.waited_for_copy));
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 500;
  if (!memseal::CudaRegion::available() || !torch::cuda::is_available()) {
    std::printf("memseal_bench_cuda_region: no CUDA device here; nothing measured\n");
    return 0;
  }
  torch::NoGradGuard no_grad;
  torch::nn::Sequential model(torch::nn::Linear(1024, 4096), torch::nn::GELU(),
                              torch::nn::Linear(4096, 4096), torch::nn::GELU(),
                              torch::nn::Linear(4096, 1000));
  model->to(torch::kCUDA);
  torch::Tensor input = torch::randn({64, 1024}, torch::kCUDA);
  torch::Tensor sink;

  // Set-ups, each measured for the reserved memory it adds.
  Result plain, region_result, graph_result;
  DeviceNumbers start = deviceNumbers();
  sink = model->forward(input);
  plain.held_bytes = deviceNumbers().reserved - start.reserved;

  start = deviceNumbers();
  memseal::CudaRegion region;
  region.run({input}, [&] { sink = model->forward(input); });
  region_result.held_bytes = deviceNumbers().reserved - start.reserved;

  start = deviceNumbers();
  at::cuda::CUDAStream capture_stream = at::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  torch::Tensor static_input = input.clone();
  torch::Tensor static_output;
  {
    c10::cuda::CUDAStreamGuard guard(capture_stream);
    static_output = model->forward(static_input);  // warm-up on the capture stream
    torch::cuda::synchronize();
    graph.capture_begin();
    static_output = model->forward(static_input);
    graph.capture_end();
  }
  torch::cuda::synchronize();
  graph_result.held_bytes = deviceNumbers().reserved - start.reserved;

  for (int round = 0; round < rounds; ++round) {
    plain.us_per_iteration.push_back(timeLoop(
        iterations, [&] { sink = model->forward(input); }, plain));
    region_result.us_per_iteration.push_back(timeLoop(
        iterations, [&] { region.run({input}, [&] { sink = model->forward(input); }); },
        region_result));
    graph_result.us_per_iteration.push_back(timeLoop(
        iterations,
        [&] {
          static_input.copy_(input);
          graph.replay();
        },
        graph_result));
  }

  // One allocation of 1 MiB and its free, with and without the region.
  std::vector<double> alloc_plain, alloc_region;
  constexpr int kAllocations = 10000;
  for (int round = 0; round < rounds; ++round) {
    Result ignored;
    alloc_plain.push_back(timeLoop(
        kAllocations, [&] { sink = torch::empty({1 << 18}, torch::kCUDA); }, ignored));
    alloc_region.push_back(timeLoop(
                               1,
                               [&] {
                                 region.run("alloc", [&] {
                                   for (int i = 0; i < kAllocations; ++i)
                                     sink = torch::empty({1 << 18}, torch::kCUDA);
                                 });
                               },
                               ignored) /
                           kAllocations);
  }

  cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  std::printf("device: %s; MLP 1024-4096-4096-1000, batch 64, %d rounds x %d iterations\n",
              properties->name, rounds, iterations);
  std::printf(
      "| set-up | us/iteration (median) | vs caching allocator | cudaMalloc in steady "
      "state | reserved memory it holds |\n|---|---|---|---|---|\n");
  double base = median(plain.us_per_iteration);
  auto row = [&](const char* name, const Result& result) {
    double us = median(result.us_per_iteration);
    std::printf("| %s | %.1f | %.3fx | %lld | %.1f MiB |\n", name, us, us / base,
                static_cast<long long>(result.steady_segments),
                static_cast<double>(result.held_bytes) / (1 << 20));
  };
  row("caching allocator", plain);
  row("memseal::CudaRegion", region_result);
  row("CUDA graph (private pool)", graph_result);
  std::printf("one 1 MiB allocation and free: caching allocator %.2f us, in a CudaRegion %.2f us\n",
              median(alloc_plain), median(alloc_region));
  uploadBenchmark(rounds, std::max(1, iterations / 5));
  return 0;
}
