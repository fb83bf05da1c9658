// The memory_viz pickle read back with libtorch's own unpickler: the structure
// torch.cuda.memory._snapshot() returns, stacks written once however often they are used, text
// that survives any bytes, and errors that name the bad item. With MEMSEAL_VIZ_SAMPLE set, the
// sample test also writes its pickle there for tests/report/memory_viz_check.py.
#include "report/memory_viz.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace memseal::report {
namespace {

using c10::IValue;
using Action = VizEvent::Action;

IValue unpickle(const std::string& bytes) {
  return torch::jit::unpickle(bytes.data(), bytes.size());
}

const IValue& field(const IValue& dict, const char* key) {
  const auto generic = dict.toGenericDict();
  auto found = generic.find(IValue(key));
  if (found == generic.end()) throw std::out_of_range(std::string("no key '") + key + "'");
  // The dict's storage outlives this reference: `dict` holds it.
  return found->value();
}

std::vector<std::string> keysOf(const IValue& dict) {
  std::vector<std::string> keys;
  for (const auto& entry : dict.toGenericDict()) keys.push_back(entry.key().toStringRef());
  return keys;
}

std::int64_t intField(const IValue& dict, const char* key) { return field(dict, key).toInt(); }
std::string stringField(const IValue& dict, const char* key) {
  return field(dict, key).toStringRef();
}
c10::List<IValue> listField(const IValue& dict, const char* key) {
  return field(dict, key).toList();
}

// Two stacks, innermost frame first.
VizDevice smallDevice() {
  VizDevice device;
  device.name = "cpu";
  device.stacks = {{{"at::empty", "aten/TensorFactories.cpp", 12}, {"forward", "model.py", 7}},
                   {{"operator new", "libstdc++.so.6", 0}}};
  device.live = {{0x9000, 300, 1}, {0x1000, 4096, 0}};
  device.trace = {
      {Action::kAlloc, 0x1000, 4096, 10, 0},       {Action::kAlloc, 0x5000, 64, 11, 0},
      {Action::kFreeRequested, 0x5000, 64, 12, 0}, {Action::kFreeCompleted, 0x5000, 64, 12, 0},
      {Action::kAlloc, 0x9000, 300, 13, 1},        {Action::kAlloc, 0x7000, 8, 14, -1}};
  return device;
}

TEST(MemoryViz, ReadsBackAsTheSnapshotDictionary) {
  VizDevice second;
  second.name = "second";
  second.stacks = {{{"g", "g.py", 1}}};
  second.live = {{0x40, 16, 0}};
  // The allocator's settings, as torch's snapshot keeps them: what `memseal whatif` replays first.
  unsetenv("PYTORCH_ALLOC_CONF");
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
  IValue snapshot = unpickle(memoryVizPickle({smallDevice(), second}));
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");

  ASSERT_TRUE(snapshot.isGenericDict());
  EXPECT_EQ(keysOf(snapshot), (std::vector<std::string>{"memseal", "segments", "device_traces",
                                                        "allocator_settings"}));
  EXPECT_EQ(stringField(field(snapshot, "allocator_settings"), "PYTORCH_CUDA_ALLOC_CONF"),
            "expandable_segments:True");
  const IValue& about = field(snapshot, "memseal");
  EXPECT_EQ(stringField(about, "schema"), "memseal.memory_viz/1");
  auto names = listField(about, "devices");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names.get(1).toStringRef(), "second");
  std::vector<std::string> event_fields;
  for (const IValue& key : listField(about, "event_fields"))
    event_fields.push_back(key.toStringRef());
  std::vector<std::string> event_actions;
  for (const IValue& key : listField(about, "event_actions")) {
    event_actions.push_back(key.toStringRef());
  }
  EXPECT_EQ(event_actions,
            (std::vector<std::string>{"segment_alloc", "alloc", "free_requested", "free_completed",
                                      "segment_free", "segment_map", "segment_unmap", "oom"}));

  // One segment per live block, by address within a device, each holding one active block.
  auto segments = listField(snapshot, "segments");
  ASSERT_EQ(segments.size(), 3u);
  const std::vector<std::int64_t> want_address = {0x1000, 0x9000, 0x40};
  const std::vector<std::int64_t> want_size = {4096, 300, 16};
  const std::vector<std::int64_t> want_device = {0, 0, 1};
  std::int64_t total = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    IValue segment = segments.get(i);
    SCOPED_TRACE("segment " + std::to_string(i));
    EXPECT_EQ(keysOf(segment),
              (std::vector<std::string>{"device", "address", "total_size", "allocated_size",
                                        "active_size", "requested_size", "stream", "segment_type",
                                        "segment_pool_id", "is_expandable", "frames", "blocks"}));
    EXPECT_EQ(intField(segment, "device"), want_device[i]);
    EXPECT_EQ(intField(segment, "address"), want_address[i]);
    for (const char* key : {"total_size", "allocated_size", "active_size", "requested_size"}) {
      EXPECT_EQ(intField(segment, key), want_size[i]) << key;
    }
    EXPECT_EQ(intField(segment, "stream"), 0);
    EXPECT_EQ(stringField(segment, "segment_type"), "large");
    const IValue& pool = field(segment, "segment_pool_id");
    ASSERT_TRUE(pool.isTuple());
    ASSERT_EQ(pool.toTupleRef().elements().size(), 2u);
    EXPECT_EQ(pool.toTupleRef().elements()[0].toInt(), 0);
    EXPECT_FALSE(field(segment, "is_expandable").toBool());

    auto blocks = listField(segment, "blocks");
    ASSERT_EQ(blocks.size(), 1u);
    IValue block = blocks.get(0);
    EXPECT_EQ(keysOf(block),
              (std::vector<std::string>{"address", "size", "requested_size", "state", "frames"}));
    EXPECT_EQ(intField(block, "address"), want_address[i]);
    EXPECT_EQ(intField(block, "size"), want_size[i]);
    EXPECT_EQ(intField(block, "requested_size"), want_size[i]);
    EXPECT_EQ(stringField(block, "state"), "active_allocated");
    EXPECT_TRUE(field(block, "frames").is(field(segment, "frames")));
    total += intField(block, "requested_size");
  }
  EXPECT_EQ(total, 4096 + 300 + 16);

  // Frames innermost first, as given.
  auto frames = listField(listField(segments.get(0), "blocks").get(0), "frames");
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(keysOf(frames.get(0)), (std::vector<std::string>{"name", "filename", "line"}));
  EXPECT_EQ(stringField(frames.get(0), "name"), "at::empty");
  EXPECT_EQ(stringField(frames.get(0), "filename"), "aten/TensorFactories.cpp");
  EXPECT_EQ(intField(frames.get(0), "line"), 12);
  EXPECT_EQ(stringField(frames.get(1), "name"), "forward");

  auto traces = listField(snapshot, "device_traces");
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_EQ(traces.get(1).toList().size(), 0u);
  auto events = traces.get(0).toList();
  // Each allocation is its own segment: made just before the alloc, released after the free.
  const std::vector<std::pair<std::string, std::size_t>> want = {
      {"segment_alloc", 0},  {"alloc", 0},          {"segment_alloc", 1}, {"alloc", 1},
      {"free_requested", 2}, {"free_completed", 3}, {"segment_free", 3},  {"segment_alloc", 4},
      {"alloc", 4},          {"segment_alloc", 5},  {"alloc", 5}};
  ASSERT_EQ(events.size(), want.size());
  const VizDevice given = smallDevice();
  for (std::size_t i = 0; i < events.size(); ++i) {
    IValue event = events.get(i);
    const VizEvent& from = given.trace[want[i].second];
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(keysOf(event),
              (std::vector<std::string>{"action", "addr", "size", "stream", "time_us", "frames"}));
    EXPECT_EQ(keysOf(event), event_fields);
    EXPECT_EQ(stringField(event, "action"), want[i].first);
    EXPECT_EQ(intField(event, "addr"), static_cast<std::int64_t>(from.address));
    EXPECT_EQ(intField(event, "size"), from.size);
    EXPECT_EQ(intField(event, "stream"), 0);
    EXPECT_EQ(intField(event, "time_us"), from.time_us);
  }
  // One list per stack, shared by the blocks and events made there: the pickle memoized it.
  EXPECT_TRUE(field(events.get(0), "frames").is(field(events.get(3), "frames")));
  EXPECT_TRUE(field(events.get(0), "frames").is(frames));
  EXPECT_FALSE(field(events.get(0), "frames").is(field(events.get(8), "frames")));
  EXPECT_EQ(listField(events.get(10), "frames").size(), 0u);
  // Event dicts themselves are never shared: the web viewer edits them in place.
  EXPECT_FALSE(events.get(4).is(events.get(5)));
}

TEST(MemoryViz, NoDevicesAndEmptyDevicesStillReadBack) {
  IValue none = unpickle(memoryVizPickle({}));
  EXPECT_EQ(listField(none, "segments").size(), 0u);
  EXPECT_EQ(listField(none, "device_traces").size(), 0u);

  IValue empty = unpickle(memoryVizPickle({VizDevice{}, VizDevice{}}));
  EXPECT_EQ(listField(empty, "segments").size(), 0u);
  auto traces = listField(empty, "device_traces");
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_EQ(traces.get(0).toList().size(), 0u);
  EXPECT_EQ(traces.get(1).toList().size(), 0u);
}

TEST(MemoryViz, FrameTextSurvivesQuotesNewlinesAndUnicode) {
  const std::string name = "say(\"hi\", 'there')\n\tnext line \\ back\\slash";
  const std::string unicode = "na\xC3\xAFve_\xCE\xBB_\xE6\x97\xA5\xE6\x9C\xAC_\xF0\x9F\x94\xA5";
  const std::string long_path(300, 'p');  // past the one-byte string lengths
  VizDevice device;
  device.name = "cpu \xE2\x9C\x93";
  device.stacks = {{{name, unicode, 1}, {"", long_path, -1}}};
  device.live = {{0x10, 1, 0}};
  device.trace = {{Action::kAlloc, 0x10, 1, 0, 0}};

  IValue snapshot = unpickle(memoryVizPickle({device}));
  auto frames = listField(listField(snapshot, "device_traces").get(0).toList().get(0), "frames");
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(stringField(frames.get(0), "name"), name);
  EXPECT_EQ(stringField(frames.get(0), "filename"), unicode);
  EXPECT_EQ(stringField(frames.get(1), "name"), "");
  EXPECT_EQ(stringField(frames.get(1), "filename"), long_path);
  EXPECT_EQ(intField(frames.get(1), "line"), -1);
  EXPECT_EQ(listField(field(snapshot, "memseal"), "devices").get(0).toStringRef(), device.name);
}

TEST(MemoryViz, InvalidUtf8BecomesReplacementCharacters) {
  // pickle.load decodes every string as UTF-8 and rejects the whole file over one bad byte.
  const std::string replacement = "\xEF\xBF\xBD";
  struct Case {
    std::string given;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"lib\xFF.so", "lib" + replacement + ".so"},                // never valid
      {"\x80start", replacement + "start"},                       // stray continuation
      {"cut\xE6\x97", "cut" + replacement + replacement},         // truncated at the end
      {"\xC0\xAF", replacement + replacement},                    // overlong '/'
      {"\xED\xA0\x80", replacement + replacement + replacement},  // UTF-16 surrogate
      {"\xF4\x90\x80\x80", replacement + replacement + replacement + replacement},  // > U+10FFFF
      {"ok \xF0\x9F\x94\xA5", "ok \xF0\x9F\x94\xA5"},  // valid 4-byte sequence
  };
  for (const Case& c : cases) {
    VizDevice device;
    device.stacks = {{{c.given, "file", 0}}};
    device.trace = {{Action::kAlloc, 0x10, 1, 0, 0}};
    IValue snapshot = unpickle(memoryVizPickle({device}));
    auto event = listField(snapshot, "device_traces").get(0).toList().get(0);
    std::string got = stringField(listField(event, "frames").get(0), "name");
    EXPECT_EQ(got, c.want) << "for the " << c.given.size() << " bytes of case "
                           << (&c - cases.data());
  }
}

TEST(MemoryViz, BadInputIsAnErrorNamingTheItem) {
  VizDevice device = smallDevice();
  device.trace[3].stack = 2;
  try {
    memoryVizPickle({device});
    FAIL() << "expected an error";
  } catch (const std::out_of_range& error) {
    EXPECT_STREQ(error.what(),
                 "memory viz: device 0 (cpu) event 3 refers to stack 2 but the device has 2 "
                 "stacks (-1 means none)");
  }
  device = smallDevice();
  device.live[1].size = -4;
  EXPECT_THROW(memoryVizPickle({device}), std::invalid_argument);
  device = smallDevice();
  device.trace[0].address = ~std::uint64_t{0};
  EXPECT_THROW(memoryVizPickle({device}), std::out_of_range);
  device = smallDevice();
  device.live[0].stack = -2;
  EXPECT_THROW(memoryVizPickle({device}), std::out_of_range);
}

TEST(MemoryViz, SharedStacksKeepTheFileSmall) {
  // 300 stacks of 8 frames and 1000 live blocks written before the trace use up the one-byte memo
  // ids; then 20000 allocations on a few stacks, each freed as MemoryTrace writes a CPU free:
  // 10^5 events with the segment events. Each stack is written once, and an event costs its own
  // dict: 6 keys, the action and the stack by memo id, and its integers (44 bytes with one-byte
  // ids, 47 when its stack's id needs 4 bytes).
  VizDevice device;
  device.name = "cpu";
  for (int s = 0; s < 300; ++s) {
    VizStack stack;
    for (int f = 0; f < 8; ++f) {
      stack.push_back({"function_" + std::to_string(s) + "_" + std::to_string(f),
                       "/home/user/project/src/module_" + std::to_string(s % 40) + ".cpp",
                       100 + f});
    }
    device.stacks.push_back(stack);
  }
  const std::uint64_t base = 0x7f12'3456'0000;  // a typical heap address: 8-byte integers
  for (int i = 0; i < 1000; ++i) {
    device.live.push_back({base - 4096 * (i + 1), 4096, i % 300});
  }
  const std::size_t without_trace = memoryVizPickle({device}).size();

  const std::size_t kAllocations = 20000;
  for (std::size_t i = 0; i < kAllocations; ++i) {
    auto stack = static_cast<std::int32_t>(i % 4 * 70);
    std::uint64_t address = base + i * 64;
    auto time = static_cast<std::int64_t>(1'700'000'000'000'000 + i);
    device.trace.push_back({Action::kAlloc, address, 4096, time, stack});
    device.trace.push_back({Action::kFreeRequested, address, 4096, time + 1, stack});
    device.trace.push_back({Action::kFreeCompleted, address, 4096, time + 1, stack});
  }
  const std::size_t kEvents = kAllocations * 5;
  std::string bytes = memoryVizPickle({device});
  double per_event = static_cast<double>(bytes.size() - without_trace) / kEvents;
  std::printf(
      "memory_viz pickle: %zu bytes without the trace, %zu with %zu events (%zu "
      "allocations and frees): %.1f bytes per event, %.0f per allocation and its free\n",
      without_trace, bytes.size(), kEvents, kAllocations, per_event, per_event * 5);
  EXPECT_LT(per_event, 50.0);

  IValue snapshot = unpickle(bytes);
  auto events = listField(snapshot, "device_traces").get(0).toList();
  ASSERT_EQ(events.size(), kEvents);
  EXPECT_TRUE(field(events.get(0), "frames").is(field(events.get(kEvents - 20), "frames")));
  EXPECT_EQ(intField(events.get(kEvents - 1), "addr"),
            static_cast<std::int64_t>(base + (kAllocations - 1) * 64));
  EXPECT_EQ(listField(snapshot, "segments").size(), 1000u);
}

// The sample tests/report/memory_viz_check.py reads: 6 allocations, 3 frees (each a
// free_requested then free_completed, as a CPU free is written), 3 blocks live at the end
// holding 4096 + 1 MiB + 24 MiB = 26218496 bytes; the 24 MiB one spans more than one of segsum's
// 20 MiB pages.
// A caching allocator's device: its segments as given, the free gaps inside them as inactive
// blocks, and its events one to one (an out-of-memory with "device_free" in place of "addr").
TEST(MemoryViz, CachingAllocatorDeviceWritesRealSegmentsAndItsOwnTrace) {
  VizDevice device;
  device.name = "cuda:0";
  device.caching_allocator = true;
  device.stacks = {{{"aten::empty_strided", "<aten>", 0}}};
  const std::int64_t kMiB = 1 << 20;
  VizSegment large{0x10000000, 20 * kMiB, 0x77, false, 0, {}};
  large.blocks = {{0x10600000, kMiB, 0, VizBlock::State::kActivePendingFree},
                  {0x10000000, 4 * kMiB, 0}};
  VizSegment small{0x20000000, 2 * kMiB, 0, true, -1, {{0x20000000, 2 * kMiB, -1}}};
  device.segments = {small, large};  // written by address
  device.trace = {{Action::kSegmentMap, 0x20000000, 2 * kMiB, 1, -1},
                  {Action::kOom, 0, 64 * kMiB, 2, 0, 0x77, 5 * kMiB}};
  device.live = {{0x1, 1, -1}};  // unused on a caching allocator's device
  IValue snapshot = unpickle(memoryVizPickle({device}));

  auto segments = listField(snapshot, "segments");
  ASSERT_EQ(segments.size(), 2u);
  IValue first = segments.get(0);
  EXPECT_EQ(intField(first, "address"), 0x10000000);
  EXPECT_EQ(intField(first, "total_size"), 20 * kMiB);
  EXPECT_EQ(intField(first, "allocated_size"), 4 * kMiB);  // the pending free is not allocated
  EXPECT_EQ(intField(first, "active_size"), 5 * kMiB);
  EXPECT_EQ(intField(first, "stream"), 0x77);
  EXPECT_EQ(stringField(first, "segment_type"), "large");
  EXPECT_FALSE(field(first, "is_expandable").toBool());
  auto blocks = listField(first, "blocks");
  ASSERT_EQ(blocks.size(), 4u);
  const std::vector<std::string> want_state = {"active_allocated", "inactive",
                                               "active_pending_free", "inactive"};
  const std::vector<std::int64_t> want_size = {4 * kMiB, 2 * kMiB, kMiB, 13 * kMiB};
  std::int64_t address = 0x10000000;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    SCOPED_TRACE("block " + std::to_string(i));
    EXPECT_EQ(stringField(blocks.get(i), "state"), want_state[i]);
    EXPECT_EQ(intField(blocks.get(i), "address"), address);
    EXPECT_EQ(intField(blocks.get(i), "size"), want_size[i]);
    address += want_size[i];
  }
  IValue second = segments.get(1);
  EXPECT_EQ(stringField(second, "segment_type"), "small");
  EXPECT_TRUE(field(second, "is_expandable").toBool());
  EXPECT_EQ(listField(second, "blocks").size(), 1u);

  auto trace = listField(snapshot, "device_traces").get(0).toList();
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(stringField(trace.get(0), "action"), "segment_map");
  EXPECT_EQ(intField(trace.get(0), "addr"), 0x20000000);
  IValue oom = trace.get(1);
  EXPECT_EQ(keysOf(oom), (std::vector<std::string>{"action", "device_free", "size", "stream",
                                                   "time_us", "frames"}));
  EXPECT_EQ(stringField(oom, "action"), "oom");
  EXPECT_EQ(intField(oom, "device_free"), 5 * kMiB);
  EXPECT_EQ(intField(oom, "size"), 64 * kMiB);
  EXPECT_EQ(intField(oom, "stream"), 0x77);
}

TEST(MemoryViz, ABlockOutsideItsSegmentIsAnErrorNamingIt) {
  VizDevice device;
  device.name = "cuda:0";
  device.caching_allocator = true;
  device.segments = {{0x1000, 4096, 0, false, -1, {{0x1800, 4096, -1}}}};
  try {
    memoryVizPickle({device});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("device 0 (cuda:0) segment 0 has a block at 6144"),
              std::string::npos)
        << error.what();
  }
  device.segments = {{0x1000, 4096, 0, false, -1, {{0x1000, 2048, -1}, {0x1400, 2048, -1}}}};
  EXPECT_THROW(memoryVizPickle({device}), std::invalid_argument);  // blocks overlap
}

TEST(MemoryViz, SampleForThePythonCheck) {
  VizDevice device;
  device.name = "cpu";
  device.stacks = {{{"memseal_viz_sample_leaf", "tests/unit/memory_viz_test.cpp", 10},
                    {"train_step", "train.py", 42},
                    {"main", "train.py", 100}},
                   {{"at::empty \"quoted\"", "aten/src/ATen/native/TensorFactories.cpp", 200},
                    {"forward \xCE\xBB", "model.py", 7}},
                   {{"operator new", "libstdc++.so.6", 0}}};
  const std::int64_t kMiB = 1 << 20;
  device.live = {{0x10000, 4096, 0}, {0x200000, kMiB, 1}, {0x4000000, 24 * kMiB, 2}};
  device.trace = {{Action::kAlloc, 0x10000, 4096, 1, 0},
                  {Action::kAlloc, 0x300000, 512, 2, 1},
                  {Action::kAlloc, 0x200000, kMiB, 3, 1},
                  {Action::kFreeRequested, 0x300000, 512, 4, 1},
                  {Action::kFreeCompleted, 0x300000, 512, 4, 1},
                  {Action::kAlloc, 0x310000, 64, 5, 2},
                  {Action::kFreeRequested, 0x310000, 64, 6, 2},
                  {Action::kFreeCompleted, 0x310000, 64, 6, 2},
                  {Action::kAlloc, 0x4000000, 24 * kMiB, 7, 2},
                  {Action::kAlloc, 0x320000, 128, 8, 0},
                  {Action::kFreeRequested, 0x320000, 128, 9, -1},
                  {Action::kFreeCompleted, 0x320000, 128, 9, -1}};
  std::string bytes = memoryVizPickle({device});

  IValue snapshot = unpickle(bytes);
  std::int64_t live = 0;
  for (const IValue& segment : listField(snapshot, "segments")) {
    live += intField(segment, "total_size");
  }
  EXPECT_EQ(live, 26218496);

  if (const char* path = std::getenv("MEMSEAL_VIZ_SAMPLE")) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    ASSERT_TRUE(out) << "cannot write " << path;
    std::printf("wrote %zu bytes to %s\n", bytes.size(), path);
  }
}

}  // namespace
}  // namespace memseal::report
