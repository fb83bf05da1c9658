// The helpers every layer shares: byte counts in one wording whatever their type, numbers that
// never wrap, and step samples thinned in bounded memory.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/bounded_samples.h"
#include "common/text.h"

namespace memseal::common {
namespace {

TEST(CommonText, BytesReadTheSameWhateverTheirType) {
  EXPECT_EQ(bytesText(0), "0 B");
  EXPECT_EQ(bytesText(1023), "1023 B");
  EXPECT_EQ(bytesText(1536), "1.5 KiB");
  EXPECT_EQ(bytesText(-3 * 1024 * 1024), "-3.0 MiB");
  EXPECT_EQ(bytesText(std::int64_t{5} << 50), "5.0 PiB");  // above TiB too, in every report
  for (std::int64_t value :
       {std::int64_t{7}, std::int64_t{4096}, std::int64_t{3} << 40, std::int64_t{9} << 50}) {
    EXPECT_EQ(bytesText(value), bytesTextFromDouble(static_cast<double>(value))) << value;
    EXPECT_EQ(bytesText(value), unsignedBytesText(static_cast<std::uint64_t>(value))) << value;
  }
  EXPECT_EQ(bytesTextFromDouble(2.5 * 1024), "2.5 KiB");
  EXPECT_EQ(unsignedBytesText(std::numeric_limits<std::uint64_t>::max()),
            bytesText(std::numeric_limits<std::int64_t>::max()));
}

TEST(CommonText, AProfilerRangeIsShownByItsOwnNameAndAnOpAsItIs) {
  EXPECT_EQ(common::shownOpName("Optimizer.step#Adam.step"), "Adam.step");
  EXPECT_EQ(common::shownOpName("aten::mul"), "aten::mul");
  EXPECT_EQ(common::shownOpName("KeepOutput"), "KeepOutput");
  EXPECT_EQ(common::shownOpName("odd#"), "odd#");
}

TEST(CommonText, ACudaDeviceIsNamedAsTorchNamesIt) {
  EXPECT_EQ(common::parseCudaDeviceName("cuda"), 0);
  EXPECT_EQ(common::parseCudaDeviceName("cuda:0"), 0);
  EXPECT_EQ(common::parseCudaDeviceName("cuda:12"), 12);
  for (const char* refused :
       {"cuda:", "cuda:x", "cuda:-1", "cpu", "cuda:12345", "", "CUDA:0", "host"}) {
    EXPECT_FALSE(common::parseCudaDeviceName(refused).has_value()) << refused;
  }
}

TEST(CommonText, DifferencesNeverWrapAndNumbersKeepTheirDecimals) {
  EXPECT_EQ(minusOrZero(10, 3), 7u);
  EXPECT_EQ(minusOrZero(3, 10), 0u);
  EXPECT_EQ(fixedText(2.345, 1), "2.3");
  EXPECT_EQ(fixedText(2, 0), "2");
}

std::string contentOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// A write that cannot finish (the disk full, here a file-size limit that makes write() fail with
// EFBIG the same way) leaves the report already there as it was and no temporary beside it.
TEST(CommonText, AWriteThatFailsHalfwayKeepsTheFileThereWholeAndLeavesNoTemporary) {
  char folder_template[] = "/tmp/memseal-write-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  std::string path = std::string(folder_template) + "/report.json";
  std::string error;
  ASSERT_TRUE(common::writeFileAtomically(path, "the earlier report", &error)) << error;

  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit small = before;
  small.rlim_cur = 4096;
  void (*previous_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // a failed write, not a signal
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool written = common::writeFileAtomically(path, std::string(1 << 20, 'x'), &error);
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous_handler);

  EXPECT_FALSE(written);
  EXPECT_EQ(error.rfind("cannot write " + path + ".tmp", 0), 0u) << error;
  EXPECT_EQ(contentOf(path), "the earlier report");
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  std::remove(path.c_str());
  rmdir(folder_template);
}

TEST(BoundedSamples, ThinningHalvesTheOlderHalfAndKeepsTheRecentOnes) {
  std::vector<int> samples;
  for (int step = 0; step < 10; ++step) samples.push_back(step);
  thinOlderHalf(samples, 16);
  EXPECT_EQ(samples.size(), 10u);  // under the limit: untouched
  thinOlderHalf(samples, 8);
  EXPECT_EQ(samples, (std::vector<int>{0, 2, 4, 5, 6, 7, 8, 9}));
  std::vector<int> many(40000);
  for (int i = 0; i < 40000; ++i) many[i] = i;
  for (int round = 0; round < 5; ++round) {
    thinOlderHalf(many, 16384);
    many.push_back(40000 + round);
  }
  EXPECT_LE(many.size(), 16385u + 5u);
  EXPECT_EQ(many.back(), 40004);
  EXPECT_EQ(many.front(), 0);  // the run's start is never lost
}

// The leak detector reserves its sample vectors once: thinning must not reallocate them (their
// pages, once touched, are what it takes out of the resident memory it reads).
TEST(BoundedSamples, ThinningKeepsTheVectorsStorage) {
  std::vector<int> samples;
  samples.reserve(101);
  for (int step = 0; step < 101; ++step) samples.push_back(step);
  const int* storage = samples.data();
  thinOlderHalf(samples, 100);
  EXPECT_EQ(samples.size(), 76u);
  EXPECT_EQ(samples.data(), storage);
  EXPECT_EQ(samples.capacity(), 101u);
}

}  // namespace
}  // namespace memseal::common
