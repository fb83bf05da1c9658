// A report's notes are fields (LeakReport's graph_nodes_unwatched, freed_build_ups, malloc_free,
// devices, cuda_oom_file, phase_changes_capped_at, origin) that the reporters put in words: the
// words are the same in text and JSON, the JSON keeps the fields, and reading it back gives the
// fields again with no note said twice; an older report's notes stay notes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memseal/explain.h"
#include "memseal/leak_detector.h"

namespace memseal {
namespace {

bool saysSomewhere(const std::vector<std::string>& lines, const std::string& words) {
  for (const std::string& line : lines) {
    if (line.find(words) != std::string::npos) return true;
  }
  return false;
}

LeakFinding freedBuildUp(bool by_collector) {
  LeakFinding build_up;
  build_up.category = LeakCategory::kTensorsRetained;
  build_up.site.op = "aten::cat";
  build_up.site.frames.push_back(StackFrame{});
  build_up.site.frames.back().file = "/app/train.py";
  build_up.site.frames.back().line = 42;
  HeldUntilFreed freed;
  freed.first_step = 10;
  freed.last_step = 29;
  freed.freed_at_step = 30;
  freed.times = 1;
  freed.steps_per_time = 20;
  freed.peak_bytes = 3 << 20;
  freed.by_collector = by_collector;
  build_up.freed = freed;
  return build_up;
}

// A report with one note of every kind, and one note in words alone.
LeakReport reportWithEveryNote() {
  LeakReport report;
  report.steps = 40;
  report.warmup = 5;
  report.graph_nodes_unwatched = "ops not watched";
  report.freed_build_ups = {freedBuildUp(false), freedBuildUp(true)};
  report.malloc_free = MallocFreeMemory{8 << 20, 300 << 20, false};
  report.phase_changes_capped_at = 64;
  report.cuda_oom_file = "/tmp/oom.json";
  DeviceMemorySummary device;
  device.device = "cuda:0";
  device.verdict = "leak";
  device.allocated = 100 << 20;
  device.reserved = 128 << 20;
  device.growth_per_step = 1 << 20;
  device.growth_shown_as = "work";
  report.devices.push_back(device);
  report.origin.taken_after_step = 60;
  report.origin.ms_before_end = 250;
  report.origin.newest_steps_kept = 512;
  report.origin.interim_age = "3.2 s";
  report.origin.pid = 4242;
  report.origin.forked_from_pid = 77;
  report.notes.push_back("a tool's own note");
  return report;
}

TEST(ReportNotes, EveryFieldIsPutInWordsOnceInTextAndJson) {
  LeakReport report = reportWithEveryNote();
  std::vector<std::string> lines = report.noteLines();
  for (const char* words :
       {"autograd graph nodes were not watched (ops not watched)",
        "held for a while, then freed (not a leak): tensors without autograd history made by "
        "aten::cat at /app/train.py:42 built up across steps (steps 10-29) and were freed together "
        "once, over 20 steps, at most 3.0 MiB",
        "garbage in reference cycles, freed by Python's garbage collector (not a leak): tensors "
        "made by aten::cat",
        "malloc holds 300 MiB of freed memory, up from 8 MiB after warm-up: holes in its heap",
        "the program changed phase more than 64 times",
        "CUDA ran out of memory; what was live then is in /tmp/oom.json",
        "cuda:0: memory allocated at step boundaries grows +1.0 MiB/step",
        "memseal run: this report was taken after step 60, 250 ms before the program ended",
        "keeps the newest 512 steps' samples",
        "memseal run: pid 4242 ended before its final report",
        "forked child of pid 77 (not exec'd)", "a tool's own note"}) {
    EXPECT_TRUE(saysSomewhere(lines, words)) << words;
  }
  EXPECT_EQ(lines.size(), 12u);
  std::string text = report.toText();
  for (const std::string& line : lines) {
    EXPECT_NE(text.find("note: " + line.substr(0, 60)), std::string::npos) << line;
  }
  nlohmann::json json = nlohmann::json::parse(report.toJson());
  EXPECT_EQ(json["notes"].get<std::vector<std::string>>(), lines);
  EXPECT_EQ(json["malloc_free"]["now_bytes"], 300 << 20);
  EXPECT_EQ(json["origin"]["forked_from_pid"], 77);
  EXPECT_TRUE(json["freed_build_ups"][1]["freed"]["by_collector"].get<bool>());
}

TEST(ReportNotes, ReadingTheJsonBackGivesTheFieldsAndSaysNothingTwice) {
  LeakReport report = reportWithEveryNote();
  LeakReport read = LeakReport::fromJson(report.toJson());
  EXPECT_EQ(read.noteLines(), report.noteLines());
  EXPECT_EQ(read.notes, std::vector<std::string>{"a tool's own note"});
  EXPECT_EQ(read.graph_nodes_unwatched, "ops not watched");
  ASSERT_EQ(read.freed_build_ups.size(), 2u);
  EXPECT_FALSE(read.freed_build_ups[0].freed->by_collector);
  EXPECT_TRUE(read.freed_build_ups[1].freed->by_collector);
  ASSERT_TRUE(read.malloc_free.has_value());
  EXPECT_EQ(read.malloc_free->after_warmup_bytes, 8 << 20);
  EXPECT_EQ(read.phase_changes_capped_at, 64u);
  EXPECT_EQ(read.cuda_oom_file, "/tmp/oom.json");
  EXPECT_EQ(read.devices[0].growth_shown_as, "work");
  EXPECT_EQ(read.origin.taken_after_step, std::optional<std::uint32_t>(60));
  EXPECT_EQ(read.origin.ms_before_end, 250);
  EXPECT_EQ(read.origin.newest_steps_kept, 512u);
  EXPECT_EQ(read.origin.interim_age, "3.2 s");
  EXPECT_EQ(read.origin.pid, 4242);
  EXPECT_EQ(read.origin.forked_from_pid, 77);
}

TEST(ReportNotes, AnOlderReportsNotesStayItsWords) {
  // Written before the notes had fields: its words are notes, said once.
  nlohmann::json older = nlohmann::json::parse(LeakReport{}.toJson());
  older["notes"] = {"malloc holds 300 MiB of freed memory, up from 8 MiB after warm-up",
                    "cuda:0: steady (1.0 MiB allocated)"};
  LeakReport read = LeakReport::fromJson(older.dump());
  EXPECT_EQ(read.notes, older["notes"].get<std::vector<std::string>>());
  EXPECT_EQ(read.noteLines(), read.notes);
  EXPECT_FALSE(read.malloc_free.has_value());
}

TEST(ReportNotes, ADeviceIsNotedUnlessAFindingOfItsOwnSaysIt) {
  LeakReport report;
  DeviceMemorySummary device;
  device.device = "cuda:0";
  device.verdict = "caching";
  device.hint = "what helps";
  report.devices.push_back(device);
  EXPECT_TRUE(saysSomewhere(report.noteLines(), "cuda:0: caching, not a leak ("))
      << report.toText();
  EXPECT_TRUE(saysSomewhere(report.noteLines(), "what helps"));
  report.devices[0].verdict = "steady";
  EXPECT_TRUE(saysSomewhere(report.noteLines(), "cuda:0: steady ("));
  report.devices[0].verdict = "leak";
  report.devices[0].growth_shown_as = "tensors";
  EXPECT_TRUE(saysSomewhere(report.noteLines(), "the findings name the tensors kept"));
  // The allocator's own finding says it.
  report.devices[0].growth_shown_as = "blocks";
  EXPECT_TRUE(report.noteLines().empty());
}

TEST(ReportNotes, ABuildUpWithoutItsFreedFieldIsRefused) {
  nlohmann::json json = nlohmann::json::parse(reportWithEveryNote().toJson());
  json["freed_build_ups"][0].erase("freed");
  try {
    LeakReport::fromJson(json.dump());
    FAIL() << "accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("freed_build_ups[0] has no \"freed\""),
              std::string::npos)
        << error.what();
  }
}

TEST(ReportNotes, ExplainsNotesComeFromWhatItCouldNotTell) {
  PeakReport report;
  report.model_identified = true;
  report.optimizer_identified = true;
  EXPECT_TRUE(report.noteLines().empty());
  report.backward_ran = false;
  report.optimizer_identified = false;
  report.dropped_events = 12;
  report.max_events_per_step = 1000;
  std::vector<std::string> lines = report.noteLines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(saysSomewhere(lines, "no backward ran in the step"));
  EXPECT_TRUE(saysSomewhere(lines, "no optimizer named"));
  EXPECT_TRUE(saysSomewhere(lines, "the step made more than 1000 allocations and frees"));
  nlohmann::json json = nlohmann::json::parse(report.toJson());
  EXPECT_EQ(json["notes"].get<std::vector<std::string>>(), lines);
  EXPECT_FALSE(json["backward_ran"].get<bool>());
  EXPECT_EQ(json["dropped_events"], 12);
}

}  // namespace
}  // namespace memseal
