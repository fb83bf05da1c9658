// The tracker's allocation trace as the pickle PyTorch's memory viewer reads: the dictionary that
// torch.cuda.memory._snapshot() returns ({"segments": [...], "device_traces": [[...], ...]}),
// written with libtorch's own pickler, so torch.cuda._memory_viz (segsum, trace, the web viewer)
// and pickle.load read it. CPU memory has no allocator segments: each live allocation is its own
// segment holding one active block, so segment totals equal tracked live bytes; in the trace, each
// allocation's segment is made with it and released with its free (segment_alloc before the alloc,
// segment_free after the free_completed), which the viewer's allocator-state view needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memseal::report {

struct VizFrame {
  std::string name;      // function (demangled), or "??" when unknown
  std::string filename;  // source file, else the library
  int line = 0;
};

// One stack, innermost frame first; events and blocks refer to stacks by index so that a stack
// shared by many events is written once (the pickle memoizes it).
using VizStack = std::vector<VizFrame>;

struct VizEvent {
  enum class Action : std::uint8_t { kAlloc, kFreeRequested, kFreeCompleted };
  Action action = Action::kAlloc;
  std::uint64_t address = 0;
  std::int64_t size = 0;
  std::int64_t time_us = 0;
  std::int32_t stack = -1;  // index into VizDevice::stacks, -1 for none
};

struct VizBlock {
  std::uint64_t address = 0;
  std::int64_t size = 0;
  std::int32_t stack = -1;
};

struct VizDevice {
  std::string name;  // "cpu" (for the report; memory_viz indexes devices by position)
  std::vector<VizStack> stacks;
  std::vector<VizBlock> live;   // allocations live when the trace was written
  std::vector<VizEvent> trace;  // oldest first
};

// The pickle's bytes (protocol 2). Device i of `devices` is device_traces[i]; every segment
// carries "device": i; the top-level "memseal" entry holds the schema, version and device names.
// An alloc becomes 2 trace entries and a free_completed 2, the others 1: the web viewer reads no
// list longer than about 125000 entries (its unpickler spreads a list into one call), so keep a
// device's trace within 100000 entries, as torch's own trace keeps by default. Throws
// std::out_of_range or std::invalid_argument naming the item for a stack index out of range, a
// negative size, or an address beyond int64.
std::string memoryVizPickle(const std::vector<VizDevice>& devices);

}  // namespace memseal::report
