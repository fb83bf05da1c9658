// The forensics of a CUDA out-of-memory on synthetic allocator event streams: fragmentation, a
// full device and a process limit told apart, as JSON and text.
#include "report/cuda_oom.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "device_replay.h"

namespace memseal {
namespace {

using namespace track;   // NOLINT: the ledger, its events and samples
using namespace detect;  // NOLINT: the diagnosis
using namespace test;    // NOLINT: the replay
using report::oomForensicsJson;
using report::oomForensicsText;

std::string siteName(std::uint32_t site) { return "model.py:" + std::to_string(site); }

TEST(OomForensics, ARequestLargerThanEveryFreePieceIsFragmentation) {
  Replay replay;
  buildFragmentedPool(replay);
  replay.endStep();
  replay.step = 20;
  replay.oom(12 * kMiB, /*device_free=*/4 * kMiB);

  DeviceMemoryTotals totals = replay.totals();
  EXPECT_EQ(totals.out_of_memory, 1u);
  EXPECT_EQ(totals.allocated, 132 * kMiB);  // the failing request was never applied
  const std::optional<OomRecord>& oom = replay.ledger.lastOom(0);
  ASSERT_TRUE(oom.has_value());
  EXPECT_FALSE(replay.ledger.lastOom(1).has_value());
  EXPECT_EQ(oom->requested_bytes, 12 * kMiB);
  EXPECT_EQ(oom->step, 20u);
  EXPECT_EQ(oom->reserved, 740 * kMiB);
  EXPECT_EQ(oom->largest_free_extent, 11 * kMiB);
  EXPECT_EQ(oom->largest_free_extent_on_stream, 11 * kMiB);
  EXPECT_EQ(oom->inactive_split_bytes, 32 * 19 * kMiB);
  EXPECT_EQ(oomCause(*oom), OomCause::kFragmentation);
  EXPECT_TRUE(mentions(oomExplanation(*oom), "Fragmentation")) << oomExplanation(*oom);

  nlohmann::ordered_json json = nlohmann::ordered_json::parse(oomForensicsJson(*oom, siteName));
  EXPECT_EQ(json.begin().key(), "schema");
  EXPECT_EQ(json["schema"], "memseal.cuda_oom/1");
  EXPECT_EQ(json["cause"], "fragmentation");
  EXPECT_EQ(json["requested_bytes"], 12 * kMiB);
  EXPECT_EQ(json["step"], 20);
  EXPECT_EQ(json["device_free_bytes"], 4 * kMiB);
  EXPECT_EQ(json["free_in_reserved_bytes"], 608 * kMiB);
  EXPECT_TRUE(mentions(json["explanation"].get<std::string>(), "largest free piece"));
  const auto& sites = json["largest_sites"];
  ASSERT_EQ(sites.size(), 3u);
  EXPECT_EQ(sites[0]["site"], 1);
  EXPECT_EQ(sites[0]["name"], "model.py:1");
  EXPECT_EQ(sites[0]["bytes"], 100 * kMiB);
  EXPECT_EQ(sites[1]["site"], 7);
  EXPECT_EQ(sites[1]["blocks"], 20);
  EXPECT_EQ(sites[2]["site"], 3);
  EXPECT_EQ(sites[2]["bytes"], 12 * kMiB);
  ASSERT_EQ(json["largest_blocks"].size(), kOomTopBlocks);
  EXPECT_EQ(json["largest_blocks"][0]["bytes"], 100 * kMiB);
  EXPECT_EQ(json["largest_blocks"][0]["address"], "0x7f0000000000");

  std::string text = oomForensicsText(*oom, siteName);
  EXPECT_TRUE(mentions(text, "at step 20")) << text;
  EXPECT_TRUE(mentions(text, "model.py:1")) << text;

  DeviceMemoryDiagnosis diagnosis = replay.diagnose(/*warmup=*/0);
  EXPECT_EQ(diagnosis.verdict, DeviceVerdict::kFragmentation);
  EXPECT_TRUE(diagnosis.oom_from_fragmentation);
  EXPECT_TRUE(mentions(diagnosis.hint, "out-of-memory at step 20")) << diagnosis.hint;
}

TEST(OomForensics, AFullDeviceIsAShortage) {
  Replay replay;
  replay.segment(kBase, 1024 * kMiB);
  for (std::uint64_t i = 0; i < 4; ++i) replay.alloc(kBase + i * 256 * kMiB, 256 * kMiB, 1);
  replay.step = 7;
  replay.oom(64 * kMiB, /*device_free=*/10 * kMiB);
  const std::optional<OomRecord>& oom = replay.ledger.lastOom(0);
  ASSERT_TRUE(oom.has_value());
  EXPECT_EQ(oom->largest_free_extent, 0u);
  EXPECT_EQ(oomCause(*oom), OomCause::kDeviceFull);
  EXPECT_TRUE(mentions(oomExplanation(*oom), "device is full")) << oomExplanation(*oom);
  EXPECT_TRUE(mentions(oomExplanation(*oom), "100% in use")) << oomExplanation(*oom);
  nlohmann::json json = nlohmann::json::parse(oomForensicsJson(*oom, nullptr));
  EXPECT_EQ(json["cause"], "device-full");
  EXPECT_EQ(json["largest_sites"][0]["name"], "site 1");
  EXPECT_EQ(json["largest_sites"][0]["blocks"], 4);

  OomRecord capped = *oom;
  capped.device_free_bytes = 2048 * kMiB;  // the device had room: this process hit a limit
  EXPECT_EQ(oomCause(capped), OomCause::kProcessLimit);
  EXPECT_TRUE(mentions(oomExplanation(capped), "set_per_process_memory_fraction"));
  EXPECT_FALSE(mentions(oomExplanation(capped), "expandable_segments")) << oomExplanation(capped);
}

TEST(OomForensics, AFragmentedCacheUnderAProcessLimitIsTheLimitFirst) {
  Replay replay;
  buildFragmentedPool(replay);
  replay.oom(12 * kMiB, /*device_free=*/100 * 1024 * kMiB);  // the device had room
  const std::optional<OomRecord>& oom = replay.ledger.lastOom(0);
  ASSERT_TRUE(oom.has_value());
  EXPECT_EQ(oomCause(*oom), OomCause::kProcessLimit);
  std::string explanation = oomExplanation(*oom);
  EXPECT_TRUE(mentions(explanation, "set_per_process_memory_fraction")) << explanation;
  EXPECT_TRUE(mentions(explanation, "split into pieces smaller than the request")) << explanation;
  EXPECT_TRUE(mentions(explanation, "expandable_segments:True")) << explanation;
}

}  // namespace
}  // namespace memseal
