// The replay of an out-of-memory error under other allocator settings, on synthetic histories whose
// answer follows from the caching allocator's rules by hand: two segments split by 8 MiB blocks,
// half freed, cannot serve a 24 MiB request within the device (fragmentation), and with
// expandable_segments the freed end of the one segment grows into it.
#include "explain/cuda_oom_replay.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "device_replay.h"
#include "report/cuda_oom.h"

namespace memseal {
namespace {

using namespace track;  // NOLINT: the ledger, its events and history
using explain::CudaAllocatorEvent;
using explain::eventsLeadingTo;
using explain::OomSettingsReplay;
using explain::replayOutOfMemory;
using test::kBase;
using test::kMiB;
using test::mentions;

constexpr std::uint64_t kSecondSegment = kBase + 0x10000000ull;

// A history kept the way device_events.cpp keeps it, beside the ledger.
struct RecordedRun {
  test::Replay replay;
  OomHistory history;

  void alloc(std::uint64_t address, std::uint64_t bytes) {
    replay.alloc(address, bytes);
    history.events.push_back({address, bytes, 0, 0, true});
  }
  void free(std::uint64_t address) {
    replay.free(address);
    history.events.push_back({address, 0, 0, 0, false});
  }
  OomRecord outOfMemory(std::uint64_t requested, std::uint64_t device_free) {
    replay.oom(requested, device_free);
    history.live_blocks = replay.ledger.occupiedBlocks(0);
    return *replay.ledger.lastOom(0);
  }
};

// Blocks A and B (8 MiB each) in a 20 MiB segment, C and D in a second, A and C freed: 16 MiB in
// use, 40 MiB reserved, the device 22 MiB more; no cached block holds 24 MiB, and a new 24 MiB
// segment would need 64 MiB of a 62 MiB device.
OomRecord fragmentedRun(RecordedRun& run) {
  run.replay.segment(kBase, 20 * kMiB);
  run.alloc(kBase, 8 * kMiB);
  run.alloc(kBase + 8 * kMiB, 8 * kMiB);
  run.replay.segment(kSecondSegment, 20 * kMiB);
  run.alloc(kSecondSegment, 8 * kMiB);
  run.alloc(kSecondSegment + 8 * kMiB, 8 * kMiB);
  run.free(kBase);
  run.free(kSecondSegment);
  return run.outOfMemory(24 * kMiB, /*device_free=*/22 * kMiB);
}

const explain::OomSettingReplay* alternative(const OomSettingsReplay& replay,
                                             const std::string& setting) {
  for (const explain::OomSettingReplay& each : replay.alternatives) {
    if (each.setting == setting) return &each;
  }
  return nullptr;
}

TEST(OomReplay, ExpandableSegmentsWouldHaveAvoidedAFragmentationOutOfMemory) {
  RecordedRun run;
  OomRecord record = fragmentedRun(run);
  OomSettingsReplay replay = replayOutOfMemory(record, run.history, "");
  EXPECT_TRUE(replay.unreadable_settings.empty()) << replay.unreadable_settings;
  EXPECT_EQ(replay.settings_in_effect, "");
  EXPECT_EQ(replay.device_bytes, 62 * kMiB);
  EXPECT_EQ(replay.allocations, 5u);  // four blocks and the failed request
  EXPECT_TRUE(replay.history_complete);
  EXPECT_EQ(replay.blocks_before_history, 0u);
  EXPECT_TRUE(replay.reproduced);
  ASSERT_EQ(replay.alternatives.size(), 3u);
  const explain::OomSettingReplay* expandable = alternative(replay, "expandable_segments:True");
  ASSERT_NE(expandable, nullptr);
  EXPECT_FALSE(expandable->runs_out);
  // Pages of 20 MiB: A and B in the first, C and D reach into the second, and the request takes
  // the free 8 MiB at the end and 16 MiB of a third.
  EXPECT_EQ(expandable->reserved_peak, 60 * kMiB);
  // Neither changes how 8 and 24 MiB blocks are cut: both run out as the defaults do.
  const explain::OomSettingReplay* max_split = alternative(replay, "max_split_size_mb:128");
  ASSERT_NE(max_split, nullptr);
  EXPECT_TRUE(max_split->runs_out);
  const explain::OomSettingReplay* divisions = alternative(replay, "roundup_power2_divisions:4");
  ASSERT_NE(divisions, nullptr);
  EXPECT_TRUE(divisions->runs_out);
}

TEST(OomReplay, TheForensicsNameTheSettingThatWouldHaveAvoidedIt) {
  RecordedRun run;
  OomRecord record = fragmentedRun(run);
  OomSettingsReplay replay = replayOutOfMemory(record, run.history, "");
  nlohmann::json json = nlohmann::json::parse(report::oomForensicsJson(record, nullptr, &replay));
  const auto& settings = json["allocator_settings"];
  EXPECT_EQ(settings["reproduced"], true);
  EXPECT_EQ(settings["allocations_replayed"], 5);
  ASSERT_EQ(settings["alternatives"].size(), 3u);
  EXPECT_EQ(settings["alternatives"][0]["setting"], "expandable_segments:True");
  EXPECT_EQ(settings["alternatives"][0]["avoids_the_error"], true);
  EXPECT_EQ(settings["alternatives"][0]["reserved_peak_bytes"], 60 * kMiB);
  EXPECT_EQ(settings["alternatives"][1]["avoids_the_error"], false);
  std::string text = report::oomForensicsText(record, nullptr, &replay);
  EXPECT_TRUE(mentions(text, "replaying 5 allocations, runs out as the allocator did")) << text;
  EXPECT_TRUE(mentions(text,
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  (reserved peak "
                       "60.0 MiB)"))
      << text;
  EXPECT_TRUE(mentions(text, "(not max_split_size_mb:128, roundup_power2_divisions:4)")) << text;
}

TEST(OomReplay, TheProgramsOwnSettingsStayAndOneInEffectIsNotTriedAgain) {
  RecordedRun run;
  OomRecord record = fragmentedRun(run);
  // A key of the pinned host allocator changes nothing here; one of a newer torch is left out.
  OomSettingsReplay replay = replayOutOfMemory(
      record, run.history, "max_split_size_mb:256,pinned_use_cuda_host_register:True,future:1");
  EXPECT_EQ(replay.settings_in_effect, "max_split_size_mb:256");
  EXPECT_EQ(replay.ignored_settings, std::vector<std::string>{"future"});
  EXPECT_TRUE(
      mentions(report::oomSettingsText(replay), "without the settings it does not know (future)"))
      << report::oomSettingsText(replay);
  EXPECT_TRUE(replay.reproduced);
  ASSERT_EQ(replay.alternatives.size(), 3u);
  // The suggestion's own value wins over the program's; its other settings are kept.
  EXPECT_NE(alternative(replay, "max_split_size_mb:256,expandable_segments:True"), nullptr);
  EXPECT_NE(alternative(replay, "max_split_size_mb:128"), nullptr);

  OomSettingsReplay expandable = replayOutOfMemory(record, run.history, "expandable_segments:True");
  EXPECT_EQ(expandable.settings_in_effect, "expandable_segments:True");
  // The allocator had expandable segments and the model, from the same history, would not have
  // run out: the history does not explain the error, so no other setting is judged.
  EXPECT_FALSE(expandable.reproduced);
  EXPECT_TRUE(expandable.alternatives.empty());
  EXPECT_TRUE(
      mentions(report::oomSettingsText(expandable), "did not run out under the settings in effect"))
      << report::oomSettingsText(expandable);
}

TEST(OomReplay, SettingsItCannotReadAreSaidAndNothingIsReplayed) {
  RecordedRun run;
  OomRecord record = fragmentedRun(run);
  OomSettingsReplay replay = replayOutOfMemory(record, run.history, "max_split_size_mb:lots");
  EXPECT_TRUE(mentions(replay.unreadable_settings, "max_split_size_mb"))
      << replay.unreadable_settings;
  EXPECT_FALSE(replay.reproduced);
  EXPECT_TRUE(replay.alternatives.empty());
  nlohmann::json json = nlohmann::json::parse(report::oomForensicsJson(record, nullptr, &replay));
  EXPECT_TRUE(mentions(json["allocator_settings"]["unreadable_settings"].get<std::string>(),
                       "is not a whole number"));
}

TEST(OomReplay, MemoryInUseBeyondTheDeviceRunsOutUnderEverySetting) {
  RecordedRun run;
  run.replay.segment(kBase, 40 * kMiB);
  run.alloc(kBase, 40 * kMiB);
  OomRecord record = run.outOfMemory(40 * kMiB, /*device_free=*/20 * kMiB);
  OomSettingsReplay replay = replayOutOfMemory(record, run.history, "");
  EXPECT_TRUE(replay.reproduced);
  ASSERT_EQ(replay.alternatives.size(), 3u);
  for (const explain::OomSettingReplay& each : replay.alternatives) {
    EXPECT_TRUE(each.runs_out) << each.setting;
  }
  EXPECT_TRUE(mentions(report::oomSettingsText(replay), "runs out under every setting tried"))
      << report::oomSettingsText(replay);
}

TEST(OomReplay, BlocksFromBeforeTheHistoryComeFirstAndUnknownFreesAreLeftOut) {
  RecordedRun run;
  run.replay.segment(kBase, 20 * kMiB);
  run.replay.alloc(kBase + 8 * kMiB, 2 * kMiB);  // step 0, before the history
  run.replay.endStep();
  run.replay.alloc(kBase, 4 * kMiB);  // step 1, before the history
  run.replay.endStep();
  run.replay.alloc(kBase + 4 * kMiB, kMiB);  // freed inside it
  run.history.dropped = 3;
  run.free(kBase + 4 * kMiB);  // its allocation is not in the history
  run.alloc(kBase + 12 * kMiB, 3 * kMiB);
  run.alloc(kBase + 16 * kMiB, kMiB);
  run.free(kBase + 16 * kMiB);
  OomRecord record = run.outOfMemory(64 * kMiB, /*device_free=*/0);

  std::vector<CudaAllocatorEvent> events = eventsLeadingTo(record, run.history);
  using Kind = CudaAllocatorEvent::Kind;
  ASSERT_EQ(events.size(), 6u);
  // Before the history, by step: the 2 MiB block of step 0, then the 4 MiB one of step 1.
  EXPECT_EQ(events[0].kind, Kind::kAlloc);
  EXPECT_EQ(events[0].bytes, 2 * kMiB);
  EXPECT_EQ(events[1].bytes, 4 * kMiB);
  EXPECT_EQ(events[2].bytes, 3 * kMiB);
  EXPECT_EQ(events[3].bytes, kMiB);
  EXPECT_EQ(events[4].kind, Kind::kFree);
  EXPECT_EQ(events[4].id, events[3].id);
  EXPECT_EQ(events[5].kind, Kind::kAlloc);
  EXPECT_EQ(events[5].bytes, 64 * kMiB);
  std::vector<std::uint64_t> ids;
  for (const CudaAllocatorEvent& event : events) {
    if (event.kind == Kind::kAlloc) ids.push_back(event.id);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());  // each allocation its own id

  OomSettingsReplay replay = replayOutOfMemory(record, run.history, "");
  EXPECT_FALSE(replay.history_complete);
  EXPECT_EQ(replay.blocks_before_history, 2u);
  EXPECT_TRUE(
      mentions(report::oomSettingsText(replay), "(2 blocks in use from before the events it kept)"))
      << report::oomSettingsText(replay);
}

}  // namespace
}  // namespace memseal
