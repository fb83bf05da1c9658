// CUDA loops under the leak detector, on a real GPU (skipped where none is found): a leaky loop is
// a CUDA memory finding; a healthy one is not; a loop that leaves a big cache is caching, not a
// leak; a forced out-of-memory writes its forensics file. Commands: DEVELOPERS.md.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <cstdio>
#include <string>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal {
namespace {

DetectorOptions quietDetector() {
  DetectorOptions options;
  options.on_leak = LeakPolicy::kNone;
  options.warmup = 3;
  return options;
}

bool hasNote(const LeakReport& report, const std::string& text) {
  for (const std::string& note : report.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

class CudaMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    torch::ones({1}, torch::kCUDA);  // CUDA initialised before the detector starts
  }
};

TEST_F(CudaMemory, OutputsKeptEveryStepAreALeak) {
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
  bool cuda_finding = false;
  for (const LeakFinding& finding : report.findings)
    cuda_finding |= finding.retained == "CUDA memory";
  EXPECT_TRUE(cuda_finding) << report.toText();
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
