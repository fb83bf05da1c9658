// CudaRegion, the GPU's planned memory: replays of a key ask the device for no new memory, blocks
// live at once never overlap, a larger input is served by the pool growing (a mismatch, counted),
// outputs outlive the region, regions do not nest. On a real GPU (skipped where none is found);
// without one, the constructor must say why. Commands: DEVELOPERS.md.
#include <torch/torch.h>

#include <gtest/gtest.h>
#if defined(MEMSEAL_TEST_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "memseal/cuda_region.h"

namespace memseal {
namespace {

TEST(CudaRegionWithoutDevice, SaysWhyItCannotBeMade) {
  if (CudaRegion::available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    CudaRegion region;
    FAIL() << "a CudaRegion was made without a CUDA device";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("CUDA"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("PlannedArena"), std::string::npos) << error.what();
  }
}

class CudaRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaRegion::available() || !torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device";
    }
    torch::ones({1}, torch::kCUDA);
  }
};

// Segments cudaMalloc'ed on device 0 so far (0 where libtorch has no CUDA: nothing runs then).
std::int64_t deviceSegmentsAllocated() {
#if defined(MEMSEAL_TEST_WITH_CUDA)
  using c10::CachingAllocator::StatType;
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0)
      .segment[static_cast<std::size_t>(StatType::AGGREGATE)]
      .allocated;
#else
  return 0;
#endif
}

TEST_F(CudaRegionTest, ReplaysOfAKeyAskTheDeviceForNoNewMemory) {
  torch::NoGradGuard no_grad;
  torch::nn::Sequential model(torch::nn::Linear(512, 1024), torch::nn::ReLU(),
                              torch::nn::Linear(1024, 10));
  model->to(torch::kCUDA);
  CudaRegion region;
  torch::Tensor input = torch::randn({64, 512}, torch::kCUDA);
  torch::Tensor expected = model->forward(input);
  torch::Tensor out;
  region.run({input}, [&] { out = model->forward(input); });  // the plan
  out = torch::Tensor();
  std::int64_t segments = deviceSegmentsAllocated();
  for (int run = 0; run < 20; ++run) {
    region.run({input}, [&] { out = model->forward(input); });
    EXPECT_TRUE(torch::allclose(out, expected));
    out = torch::Tensor();
  }
  EXPECT_EQ(deviceSegmentsAllocated(), segments);
  CudaRegionStats stats = region.stats();
  EXPECT_EQ(stats.runs, 21);
  EXPECT_EQ(stats.mismatched_runs, 0);
  ASSERT_EQ(stats.keys.size(), 1u);
  EXPECT_GT(stats.keys.begin()->second.planned_bytes, 0);
  EXPECT_EQ(stats.keys.begin()->second.reserved_bytes, stats.keys.begin()->second.planned_bytes);
}

TEST_F(CudaRegionTest, BlocksLiveAtOnceNeverOverlap) {
  CudaRegion region;
  for (int seed = 0; seed < 8; ++seed) {
    std::mt19937 random(static_cast<unsigned>(seed));
    std::uniform_int_distribution<std::int64_t> elements(1, 1 << 20);
    std::vector<torch::Tensor> live;
    region.run("mixed", [&] {
      for (int i = 0; i < 64; ++i) {
        live.push_back(torch::full({elements(random)}, static_cast<float>(i), torch::kCUDA));
        // Free some as a model's temporaries die, so blocks are reused inside the run.
        if (i % 3 == 2) live.erase(live.begin() + static_cast<std::ptrdiff_t>(i % live.size()));
      }
    });
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
    for (const torch::Tensor& tensor : live) {
      auto begin = reinterpret_cast<std::uintptr_t>(tensor.data_ptr());
      ranges.emplace_back(begin, begin + static_cast<std::uintptr_t>(tensor.nbytes()));
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "seed " << seed;
    }
    // Each tensor still holds its own value: nothing wrote over it.
    for (const torch::Tensor& tensor : live) {
      float first = tensor[0].item<float>();
      EXPECT_TRUE(torch::all(tensor == first).item<bool>()) << "seed " << seed;
    }
  }
}

TEST_F(CudaRegionTest, ALargerInputUnderTheSameKeyGrowsThePoolAndIsAMismatch) {
  CudaRegion region(CudaRegionOptions{-1, /*warn_on_mismatch=*/false});
  torch::Tensor out;
  region.run("batch", [&] { out = torch::ones({1 << 20}, torch::kCUDA) * 2; });
  region.run("batch", [&] { out = torch::ones({1 << 26}, torch::kCUDA) * 3; });
  EXPECT_EQ(out.sum().item<double>(), 3.0 * (1 << 26));
  CudaRegionStats stats = region.stats();
  EXPECT_EQ(stats.mismatched_runs, 1);
  EXPECT_GT(stats.keys.at("batch").reserved_bytes, stats.keys.at("batch").planned_bytes);
}

TEST_F(CudaRegionTest, OutputsOutliveTheRegion) {
  torch::Tensor out;
  {
    CudaRegion region;
    region.run("out", [&] { out = torch::arange(1000, torch::kCUDA).to(torch::kFloat) * 2; });
  }
  torch::Tensor other = torch::zeros({1000}, torch::kCUDA);  // may take any freed memory
  EXPECT_EQ(out.sum().item<double>(), 999.0 * 1000.0);
  EXPECT_EQ(other.sum().item<double>(), 0.0);
}

TEST_F(CudaRegionTest, RegionsDoNotNestAndAnExceptionEndsTheRun) {
  CudaRegion outer;
  CudaRegion inner;
  EXPECT_THROW(outer.run("a", [&] { inner.run("b", [] {}); }), std::logic_error);
  EXPECT_THROW(outer.run("a", [] { throw std::runtime_error("model failed"); }),
               std::runtime_error);
  // The pool's allocation context ended with the exception: a later run works.
  torch::Tensor out;
  outer.run("a", [&] { out = torch::ones({16}, torch::kCUDA); });
  EXPECT_EQ(out.sum().item<double>(), 16.0);
}

}  // namespace
}  // namespace memseal
