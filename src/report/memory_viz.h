// The tracker's allocation trace as the pickle PyTorch's memory viewer reads: the dictionary that
// torch.cuda.memory._snapshot() returns ({"segments": [...], "device_traces": [[...], ...]}),
// written with libtorch's own pickler, so torch.cuda._memory_viz (segsum, trace, the web viewer)
// and pickle.load read it. Two kinds of device:
// - CPU memory has no allocator segments: each live allocation is its own segment holding one
//   active block, so segment totals equal tracked live bytes; in the trace, each allocation's
//   segment is made with it and released with its free (segment_alloc before the alloc,
//   segment_free after the free_completed), which the viewer's allocator-state view needs.
// - A caching allocator's device (CUDA) has real segments, several blocks in each, and a trace of
//   segment and block events as the allocator reported them: both are written as given, the free
//   gaps inside a segment as "inactive" blocks, as torch's own snapshot does.
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
  // The trace entry actions of torch's snapshot ("alloc", ..., "segment_unmap", "oom").
  enum class Action : std::uint8_t {
    kAlloc,
    kFreeRequested,
    kFreeCompleted,
    kSegmentAlloc,
    kSegmentFree,
    kSegmentMap,
    kSegmentUnmap,
    kOom,
  };
  Action action = Action::kAlloc;
  std::uint64_t address = 0;
  std::int64_t size = 0;  // kOom: the failed request
  std::int64_t time_us = 0;
  std::int32_t stack = -1;  // index into VizDevice::stacks, -1 for none
  std::uint64_t stream = 0;
  // kOom only: the device's free bytes, written as "device_free" in place of "addr", as torch's
  // snapshot writes an out-of-memory entry (torch.cuda._memory_viz.trace reads it there).
  std::uint64_t device_free = 0;
};

struct VizBlock {
  enum class State : std::uint8_t { kActiveAllocated, kActivePendingFree };
  std::uint64_t address = 0;
  std::int64_t size = 0;
  std::int32_t stack = -1;
  // Pending free: the program let go, a stream still uses it ("active_pending_free").
  State state = State::kActiveAllocated;
};

// A caching allocator's segment and its occupied blocks (any order; they must lie inside it and
// not overlap). The free rest of the segment is written as "inactive" blocks.
struct VizSegment {
  std::uint64_t address = 0;
  std::int64_t size = 0;
  std::uint64_t stream = 0;
  bool expandable = false;
  std::int32_t stack = -1;  // where it was made
  std::vector<VizBlock> blocks;
};

struct VizDevice {
  std::string name;  // "cpu", "cuda:0" (for the report; memory_viz indexes devices by position)
  std::vector<VizStack> stacks;
  std::vector<VizEvent> trace;  // oldest first
  // CPU: the allocations live when the trace was written, each written as its own segment.
  std::vector<VizBlock> live;
  // A caching allocator's device: `segments` and `trace` are written as given and `live` is
  // unused. A segment made in the trace must be made by its events there (segment_alloc or
  // segment_map), and its blocks by alloc events, so that the viewer can step back through them.
  bool caching_allocator = false;
  std::vector<VizSegment> segments;
};

// The pickle's bytes (protocol 2). Device i of `devices` is device_traces[i]; every segment
// carries "device": i; the top-level "memseal" entry holds the schema, version and device names.
// On a CPU device an alloc becomes 2 trace entries and a free_completed 2, the others 1 (on a
// caching allocator's device every event is 1): the web viewer reads no
// list longer than about 125000 entries (its unpickler spreads a list into one call), so keep a
// device's trace within 100000 entries, as torch's own trace keeps by default. Throws
// std::out_of_range or std::invalid_argument naming the item for a stack index out of range, a
// negative size, an address or stream beyond int64, or a block outside its segment or on another.
std::string memoryVizPickle(const std::vector<VizDevice>& devices);

}  // namespace memseal::report
