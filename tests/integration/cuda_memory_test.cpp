// CUDA loops under the leak detector and scopes, on a real GPU (skipped where none is found): kept
// outputs, a loss added up with its history and inference with grad on get the categories they
// get on the CPU, with the CUDA tensor's shape and op; a healthy loop is not a leak; a loop that
// leaves a big cache is caching, not a leak; a CUDA tensor kept past a scope is its survivor; a
// forced out-of-memory writes its forensics file. Commands: DEVELOPERS.md.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <cstdio>
#include <string>
#include <vector>

#include "integration/detector_helpers.h"
#include "memseal/leak_detector.h"
#include "memseal/scope.h"

namespace memseal {
namespace {

using test::hasNote;
using test::quietDetector;

class CudaMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::ones({1}, torch::kCUDA);  // CUDA initialised before the detector starts
  }
};

const LeakFinding* findingOn(const LeakReport& report, const std::string& device) {
  for (const LeakFinding& finding : report.findings) {
    if (finding.tensor.device == device) return &finding;
  }
  return nullptr;
}

TEST_F(CudaMemory, OutputsKeptEveryStepAreRetainedCudaTensors) {
  std::vector<torch::Tensor> kept;
  torch::Tensor weight = torch::randn({512, 512}, torch::kCUDA);
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 30; ++step) {
    torch::Tensor x = torch::randn({256, 512}, torch::kCUDA);
    kept.push_back(x.matmul(weight).relu());
    detector.step();
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  const LeakFinding* finding = findingOn(report, "cuda:0");
  ASSERT_NE(finding, nullptr) << report.toText();
  EXPECT_EQ(finding->category, LeakCategory::kTensorsRetained) << report.toText();
  EXPECT_EQ(finding->tensor.shape, (std::vector<std::int64_t>{256, 512})) << report.toText();
  EXPECT_EQ(finding->tensor.dtype, "Float");
  // CUDA's relu runs aten::clamp_min inside aten::relu (the CPU's allocates in aten::relu): the op
  // that allocated, or the one the program called.
  EXPECT_NE((finding->site.op + " " + finding->site.outer_op).find("relu"), std::string::npos)
      << report.toText();
  EXPECT_TRUE(hasNote(report, "cuda:0: memory allocated to tensors grows")) << report.toText();
}

TEST_F(CudaMemory, ALossAddedUpWithItsHistoryIsAnAutogradGraphOnTheGpu) {
  torch::nn::Linear model(64, 64);
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  torch::Tensor total_loss = torch::zeros({}, torch::kCUDA);
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 30; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = model->forward(torch::randn({32, 64}, torch::kCUDA)).pow(2).mean();
    loss.backward();
    optimizer.step();
    total_loss = total_loss + loss;  // the bug: every step's graph stays alive behind it
    detector.step();
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  EXPECT_EQ(report.findings.front().category, LeakCategory::kAutogradGraphRetained)
      << report.toText();
}

TEST_F(CudaMemory, InferenceWithGradEnabledOnTheGpuIsNamed) {
  torch::nn::Linear model(256, 256);
  model->to(torch::kCUDA);
  std::vector<torch::Tensor> outputs;
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 30; ++step) {
    outputs.push_back(model->forward(torch::randn({64, 256}, torch::kCUDA)).relu());
    detector.step();
  }
  LeakReport report = detector.finish();
  ASSERT_TRUE(report.leak) << report.toText();
  EXPECT_EQ(report.findings.front().category, LeakCategory::kGradEnabledInference)
      << report.toText();
}

TEST_F(CudaMemory, ACudaTensorKeptPastALifetimeScopeIsItsSurvivor) {
  ScopeOptions options;
  options.on_survivors = ReportPolicy::kNone;
  torch::Tensor leaked;
  torch::Tensor declared;
  ScopeReport report;
  {
    LifetimeScope scope("gpu", options);
    leaked = torch::ones({1024, 1024}, torch::kCUDA) * 2;
    declared = scope.keep(torch::ones({512}, torch::kCUDA) + 1);
    report = scope.close();
  }
  ASSERT_EQ(report.stats.survivors, 1) << report.toText();
  EXPECT_EQ(report.survivors.front().allocation.tensor.device, "cuda:0") << report.toText();
  EXPECT_EQ(report.survivors.front().allocation.tensor.shape,
            (std::vector<std::int64_t>{1024, 1024}));
}

TEST_F(CudaMemory, AHealthyLoopIsNotALeak) {
  torch::Tensor weight = torch::randn({512, 512}, torch::kCUDA);
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 30; ++step) {
    torch::Tensor x = torch::randn({256, 512}, torch::kCUDA);
    float total = x.matmul(weight).relu().sum().item<float>();
    (void)total;
    detector.step();
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_TRUE(hasNote(report, "cuda:")) << report.toText();  // device memory was watched
}

TEST_F(CudaMemory, ABigCacheLeftByOneRequestIsCachingNotALeak) {
  LeakDetector detector(quietDetector());
  for (int step = 0; step < 30; ++step) {
    // Step 1 asks for 1 GiB once; the cache keeps the segment while later steps use 16 MiB.
    std::int64_t elements = step == 1 ? (std::int64_t{1} << 28) : (std::int64_t{1} << 22);
    torch::Tensor big = torch::empty({elements}, torch::kCUDA);
    big.fill_(1);
    detector.step();
  }
  LeakReport report = detector.finish();
  EXPECT_FALSE(report.leak) << report.toText();
  EXPECT_TRUE(hasNote(report, "caching, not a leak")) << report.toText();
}

TEST_F(CudaMemory, AnOutOfMemoryWritesForensics) {
  char folder_template[] = "/tmp/memseal-cuda-oom-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string folder = folder_template;
  setenv("MEMSEAL_OOM_DIR", folder.c_str(), 1);
  LeakDetector detector(quietDetector());
  torch::Tensor held = torch::empty({1 << 20}, torch::kCUDA);
  detector.step();
  EXPECT_THROW(torch::empty({std::int64_t{1} << 50}, torch::kCUDA), c10::OutOfMemoryError);
  unsetenv("MEMSEAL_OOM_DIR");
  LeakReport report = detector.finish();
  EXPECT_TRUE(hasNote(report, "CUDA ran out of memory; what was live then is in " + folder))
      << report.toText();
  std::string written = folder + "/memseal-cuda-oom-" + std::to_string(getpid()) + "-1.json";
  EXPECT_EQ(access(written.c_str(), R_OK), 0) << written;
  std::remove(written.c_str());
  rmdir(folder.c_str());
}

}  // namespace
}  // namespace memseal
