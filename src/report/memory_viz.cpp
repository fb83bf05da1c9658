// memoryVizPickle: the tracker's trace as the dictionary torch.cuda.memory._snapshot() returns,
// built from IValues and written by libtorch's Pickler the way torch/csrc/cuda/memory_snapshot.cpp
// writes the CUDA allocator's snapshot.
//
// What the readers (pickle.load, torch.cuda._memory_viz, the web viewer MemoryViz.js) rely on:
// - Plain dicts, lists, tuples, strings, ints and bools only. Aggregates are written untagged
//   (tag_aggregates = false, as torch does here), so the pickle holds no GLOBAL or REDUCE:
//   pickle.load needs no torch, and MemoryViz.js, whose own unpickler knows a fixed set of
//   opcodes, reads every opcode in it.
// - A stack is one List shared by every block and event made there. The Pickler memoizes an
//   aggregate held more than once, so a stack is written once and later uses cost one BINGET;
//   strings are memoized by value, so each key and action name is written once as well.
// - Frames are innermost first, as torch's symbolizer gives them: memory_viz reverses them for
//   flame graphs (root first) and the viewer prints them top-down.
// - Every block lies in a segment at every point of the trace. The viewer's "Allocator State
//   History" steps back from the final state, undoing events, and fails on a block outside every
//   segment. On the CPU each allocation is its own segment, so the trace makes it (segment_alloc)
//   just before the alloc and releases it (segment_free) just after the free_completed; the CUDA
//   allocator's trace has these events too, and trace() prints them as cudaMalloc/cudaFree lines.
//   A caching allocator's device brings its own segments and segment events, written as given.
// - Event dicts are never shared: the viewer rewrites events in place (version, stream, and it
//   merges a free_requested followed by a free_completed at the same address into one "free").
// - Strings are UTF-8: pickle decodes every string as UTF-8 and one bad byte fails the whole load,
//   so invalid bytes in names and paths become U+FFFD.
#include "report/memory_viz.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/schemas.h"
#include "explain/cuda_allocator_settings.h"

namespace memseal::report {

namespace {

using c10::IValue;
using GenericDict = c10::Dict<IValue, IValue>;
using GenericList = c10::List<IValue>;

// Under the top-level key "memseal", beside what torch's snapshot holds; the viewers ignore keys
// they do not read.

GenericDict newDict() { return GenericDict(c10::AnyType::get(), c10::AnyType::get()); }
GenericList newList() { return GenericList(c10::AnyType::get()); }

// Every key and fixed value, made once: one string IValue reused costs a reference count where a
// fresh one per event would cost an allocation (the pickle is the same: strings memoize by value).
// Dict keys, trace actions, and the values of segment_type and a block's state.
struct KeyNames {
  IValue device = "device";
  IValue address = "address";
  IValue total_size = "total_size";
  IValue allocated_size = "allocated_size";
  IValue active_size = "active_size";
  IValue requested_size = "requested_size";
  IValue stream = "stream";
  IValue segment_type = "segment_type";
  IValue segment_pool_id = "segment_pool_id";
  IValue is_expandable = "is_expandable";
  IValue frames = "frames";
  IValue blocks = "blocks";
  IValue size = "size";
  IValue state = "state";
  IValue action = "action";
  IValue device_free = "device_free";
  IValue addr = "addr";
  IValue time_us = "time_us";
  IValue name = "name";
  IValue filename = "filename";
  IValue line = "line";
};

struct ActionNames {
  IValue alloc = "alloc";
  IValue free_requested = "free_requested";
  IValue free_completed = "free_completed";
  IValue segment_alloc = "segment_alloc";
  IValue segment_free = "segment_free";
  IValue segment_map = "segment_map";
  IValue segment_unmap = "segment_unmap";
  IValue oom = "oom";
};

struct ValueNames {
  IValue large = "large";
  IValue small = "small";
  IValue active_allocated = "active_allocated";
  IValue inactive = "inactive";
  IValue active_pending_free = "active_pending_free";
};

struct Names {
  KeyNames key;
  ActionNames actions;
  ValueNames value;
};

const IValue& actionName(const Names& names, VizEvent::Action action) {
  switch (action) {
    case VizEvent::Action::kAlloc:
      return names.actions.alloc;
    case VizEvent::Action::kFreeRequested:
      return names.actions.free_requested;
    case VizEvent::Action::kFreeCompleted:
      return names.actions.free_completed;
    case VizEvent::Action::kSegmentAlloc:
      return names.actions.segment_alloc;
    case VizEvent::Action::kSegmentFree:
      return names.actions.segment_free;
    case VizEvent::Action::kSegmentMap:
      return names.actions.segment_map;
    case VizEvent::Action::kSegmentUnmap:
      return names.actions.segment_unmap;
    case VizEvent::Action::kOom:
      return names.actions.oom;
  }
  throw std::invalid_argument("memory viz: an event has an unknown action");
}

// Length of the well-formed UTF-8 sequence starting at text[at], or 0 when none starts there
// (stray continuation byte, truncated sequence, overlong form, surrogate, beyond U+10FFFF).
std::size_t utf8SequenceLength(const std::string& text, std::size_t at) {
  auto lead = static_cast<unsigned char>(text[at]);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t code_point = 0;
  std::uint32_t smallest = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, smallest = 0x10000;
  } else {
    return 0;
  }
  if (text.size() - at < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    auto next = static_cast<unsigned char>(text[at + i]);
    if ((next & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (next & 0x3F);
  }
  bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
  if (code_point < smallest || code_point > 0x10FFFF || surrogate) return 0;
  return length;
}

// `text` with each byte that starts no well-formed sequence replaced by U+FFFD.
std::string validUtf8(const std::string& text) {
  std::string out;
  std::size_t copied = 0;  // text[0, copied) is in `out` already
  for (std::size_t at = 0; at < text.size();) {
    std::size_t length = utf8SequenceLength(text, at);
    if (length > 0) {
      at += length;
      continue;
    }
    out.append(text, copied, at - copied).append("\xEF\xBF\xBD");
    copied = ++at;
  }
  if (copied == 0) return text;
  return out.append(text, copied, std::string::npos);
}

// The item an error is about ("device 0 (cpu) event 12"), put into words only on error: the
// checks run once per traced allocation and free.
struct Where {
  const std::string& device;
  const char* item;
  std::size_t index;

  std::string text() const {
    return "memory viz: " + device + " " + item + " " + std::to_string(index);
  }
};

std::string deviceLabel(const VizDevice& device, std::size_t index) {
  return "device " + std::to_string(index) + (device.name.empty() ? "" : " (" + device.name + ")");
}

// Addresses are pickled as Python ints through int64 IValues.
std::int64_t addressValue(std::uint64_t address, const Where& where) {
  if (address > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw std::out_of_range(where.text() + " has address " + std::to_string(address) +
                            ", beyond the signed 64-bit integers libtorch's pickler writes");
  }
  return static_cast<std::int64_t>(address);
}

std::int64_t sizeValue(std::int64_t size, const Where& where) {
  if (size < 0) {
    throw std::invalid_argument(where.text() + " has size " + std::to_string(size) +
                                "; sizes are byte counts and cannot be negative");
  }
  return size;
}

// The stacks of one device as pickled lists, and the lookup that checks indices.
class DeviceStacks {
 public:
  DeviceStacks(const VizDevice& device, const Names& names, const GenericList& empty_frames)
      : empty_frames_(empty_frames) {
    lists_.reserve(device.stacks.size());
    for (const VizStack& stack : device.stacks) {
      GenericList frames = newList();
      frames.reserve(stack.size());
      for (const VizFrame& frame : stack) {
        GenericDict entry = newDict();
        entry.insert(names.key.name, validUtf8(frame.name));
        entry.insert(names.key.filename, validUtf8(frame.filename));
        entry.insert(names.key.line, static_cast<std::int64_t>(frame.line));
        frames.push_back(std::move(entry));
      }
      lists_.push_back(std::move(frames));
    }
  }

  const GenericList& at(std::int32_t index, const Where& where) const {
    if (index == -1) return empty_frames_;
    if (index < -1 || static_cast<std::size_t>(index) >= lists_.size()) {
      throw std::out_of_range(where.text() + " refers to stack " + std::to_string(index) +
                              " but the device has " + std::to_string(lists_.size()) +
                              " stacks (-1 means none)");
    }
    return lists_[static_cast<std::size_t>(index)];
  }

 private:
  const GenericList& empty_frames_;
  std::vector<GenericList> lists_;
};

// One live allocation as a segment of its own holding one active block: segsum then counts each
// allocation once, with nothing free, and the viewers find every block inside a segment.
GenericDict segmentOf(const VizBlock& block, std::int64_t device_index, const GenericList& frames,
                      const IValue& pool_id, const Names& names, const Where& where) {
  std::int64_t address = addressValue(block.address, where);
  std::int64_t size = sizeValue(block.size, where);
  GenericDict entry = newDict();
  entry.insert(names.key.address, address);
  entry.insert(names.key.size, size);
  entry.insert(names.key.requested_size, size);
  entry.insert(names.key.state, names.value.active_allocated);
  entry.insert(names.key.frames, frames);
  GenericList blocks = newList();
  blocks.push_back(std::move(entry));

  GenericDict segment = newDict();
  segment.insert(names.key.device, device_index);
  segment.insert(names.key.address, address);
  segment.insert(names.key.total_size, size);
  segment.insert(names.key.allocated_size, size);
  segment.insert(names.key.active_size, size);
  segment.insert(names.key.requested_size, size);
  segment.insert(names.key.stream, std::int64_t{0});
  segment.insert(names.key.segment_type, names.value.large);
  segment.insert(names.key.segment_pool_id, pool_id);
  segment.insert(names.key.is_expandable, false);
  // The segment was made by the allocation itself, so it carries the same stack: with none the
  // viewer would say it "was allocated before _record_history was enabled".
  segment.insert(names.key.frames, frames);
  segment.insert(names.key.blocks, std::move(blocks));
  return segment;
}

// The torch.cuda.Stream handle, like an address, must fit the pickler's int64.
std::int64_t streamValue(std::uint64_t stream, const Where& where) {
  if (stream > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw std::out_of_range(where.text() + " has stream " + std::to_string(stream) +
                            ", beyond the signed 64-bit integers libtorch's pickler writes");
  }
  return static_cast<std::int64_t>(stream);
}

// Segments up to the small pool's 2 MiB come from it (requests up to 1 MiB); the large pool's are
// bigger (20 MiB, or the request rounded up to 2 MiB above 10 MiB).
constexpr std::int64_t kSmallSegmentBytes = 2 << 20;

GenericDict blockEntry(std::int64_t address, std::int64_t size, const IValue& state,
                       std::int64_t requested, const GenericList& frames, const Names& names) {
  GenericDict entry = newDict();
  entry.insert(names.key.address, address);
  entry.insert(names.key.size, size);
  entry.insert(names.key.requested_size, requested);
  entry.insert(names.key.state, state);
  entry.insert(names.key.frames, frames);
  return entry;
}

// A caching allocator's segment as torch's snapshot lists it: its blocks by address, covering it
// whole, the free gaps between occupied blocks written as "inactive" ones (no frames).
GenericDict cachingSegmentOf(const VizSegment& given, std::int64_t device_index,
                             const DeviceStacks& stacks, const GenericList& empty_frames,
                             const IValue& pool_id, const Names& names, const Where& where) {
  std::int64_t address = addressValue(given.address, where);
  std::int64_t size = sizeValue(given.size, where);
  if (address > std::numeric_limits<std::int64_t>::max() - size) {
    throw std::out_of_range(where.text() + " ends beyond the signed 64-bit integers");
  }
  std::vector<const VizBlock*> occupied;
  for (const VizBlock& block : given.blocks) occupied.push_back(&block);
  std::stable_sort(occupied.begin(), occupied.end(),
                   [](const VizBlock* a, const VizBlock* b) { return a->address < b->address; });
  GenericList blocks = newList();
  std::int64_t cursor = address;
  std::int64_t allocated = 0;
  std::int64_t active = 0;
  for (const VizBlock* block : occupied) {
    std::int64_t block_address = addressValue(block->address, where);
    std::int64_t block_size = sizeValue(block->size, where);
    if (block_address < cursor || block_size > address + size - block_address) {
      throw std::invalid_argument(
          where.text() + " has a block at " + std::to_string(block->address) + " of " +
          std::to_string(block->size) + " bytes that lies outside the segment or on another block");
    }
    if (block_address > cursor) {
      blocks.push_back(
          blockEntry(cursor, block_address - cursor, names.value.inactive, 0, empty_frames, names));
    }
    bool pending = block->state == VizBlock::State::kActivePendingFree;
    blocks.push_back(
        blockEntry(block_address, block_size,
                   pending ? names.value.active_pending_free : names.value.active_allocated,
                   block_size, stacks.at(block->stack, where), names));
    active += block_size;
    if (!pending) allocated += block_size;
    cursor = block_address + block_size;
  }
  if (cursor < address + size) {
    blocks.push_back(
        blockEntry(cursor, address + size - cursor, names.value.inactive, 0, empty_frames, names));
  }
  GenericDict segment = newDict();
  segment.insert(names.key.device, device_index);
  segment.insert(names.key.address, address);
  segment.insert(names.key.total_size, size);
  segment.insert(names.key.allocated_size, allocated);
  segment.insert(names.key.active_size, active);
  segment.insert(names.key.requested_size, allocated);
  segment.insert(names.key.stream, streamValue(given.stream, where));
  segment.insert(names.key.segment_type,
                 size <= kSmallSegmentBytes ? names.value.small : names.value.large);
  segment.insert(names.key.segment_pool_id, pool_id);
  segment.insert(names.key.is_expandable, given.expandable);
  segment.insert(names.key.frames, stacks.at(given.stack, where));
  segment.insert(names.key.blocks, std::move(blocks));
  return segment;
}

GenericDict eventOf(const IValue& action, const VizEvent& event, const GenericList& frames,
                    const Names& names, const Where& where) {
  GenericDict entry = newDict();
  entry.insert(names.key.action, action);
  if (event.action == VizEvent::Action::kOom) {
    entry.insert(names.key.device_free, addressValue(event.device_free, where));
  } else {
    entry.insert(names.key.addr, addressValue(event.address, where));
  }
  entry.insert(names.key.size, sizeValue(event.size, where));
  entry.insert(names.key.stream, streamValue(event.stream, where));
  entry.insert(names.key.time_us, event.time_us);
  entry.insert(names.key.frames, frames);
  return entry;
}

std::string writePickle(const IValue& value) {
  std::string out;
  torch::jit::Pickler pickler(
      [&out](const char* data, std::size_t size) { out.append(data, size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
      /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  return out;
}

// Shared by every device: the interned strings, the one empty frame list and the pool id.
struct PickleContext {
  const Names names{};
  // Shared like the stacks: every frameless block and event refers to this one list.
  const GenericList empty_frames = newList();
  // Every segment is in the default pool, (0, 0) as torch writes it; one tuple, memoized.
  const IValue pool_id =
      c10::ivalue::Tuple::create(IValue(std::int64_t{0}), IValue(std::int64_t{0}));
};

// A device with the CUDA caching allocator: its segments by address, and its trace as recorded.
void addCachingDevice(const PickleContext& context, const VizDevice& device, std::size_t index,
                      GenericList& segments, GenericList& device_traces) {
  const std::string label = deviceLabel(device, index);
  const auto device_index = static_cast<std::int64_t>(index);
  DeviceStacks stacks(device, context.names, context.empty_frames);
  std::vector<std::size_t> by_address(device.segments.size());
  std::iota(by_address.begin(), by_address.end(), std::size_t{0});
  std::stable_sort(by_address.begin(), by_address.end(), [&](std::size_t a, std::size_t b) {
    return device.segments[a].address < device.segments[b].address;
  });
  for (std::size_t segment_index : by_address) {
    const Where where{label, "segment", segment_index};
    segments.push_back(cachingSegmentOf(device.segments[segment_index], device_index, stacks,
                                        context.empty_frames, context.pool_id, context.names,
                                        where));
  }
  GenericList trace = newList();
  trace.reserve(device.trace.size());
  for (std::size_t event_index = 0; event_index < device.trace.size(); ++event_index) {
    const VizEvent& event = device.trace[event_index];
    const Where where{label, "event", event_index};
    trace.push_back(eventOf(actionName(context.names, event.action), event,
                            stacks.at(event.stack, where), context.names, where));
  }
  device_traces.push_back(std::move(trace));
}

// A device without one (the CPU): each live block a segment of its own, by address, and each
// allocation and free wrapped in the segment events the viewer expects around it.
void addBlockDevice(const PickleContext& context, const VizDevice& device, std::size_t index,
                    GenericList& segments, GenericList& device_traces) {
  const std::string label = deviceLabel(device, index);
  const auto device_index = static_cast<std::int64_t>(index);
  const Names& names = context.names;
  DeviceStacks stacks(device, names, context.empty_frames);
  // By address, as the CUDA allocator lists its segments.
  std::vector<std::size_t> order(device.live.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return device.live[a].address < device.live[b].address;
  });
  for (std::size_t live_index : order) {
    const VizBlock& block = device.live[live_index];
    const Where where{label, "live block", live_index};
    segments.push_back(segmentOf(block, device_index, stacks.at(block.stack, where),
                                 context.pool_id, names, where));
  }
  GenericList trace = newList();
  for (std::size_t event_index = 0; event_index < device.trace.size(); ++event_index) {
    const VizEvent& event = device.trace[event_index];
    const Where where{label, "event", event_index};
    const GenericList& frames = stacks.at(event.stack, where);
    if (event.action == VizEvent::Action::kAlloc) {
      trace.push_back(eventOf(names.actions.segment_alloc, event, frames, names, where));
    }
    trace.push_back(eventOf(actionName(names, event.action), event, frames, names, where));
    if (event.action == VizEvent::Action::kFreeCompleted) {
      trace.push_back(eventOf(names.actions.segment_free, event, frames, names, where));
    }
  }
  device_traces.push_back(std::move(trace));
}

// What memseal wrote, first in the file. It also names the event fields and actions before
// anything else: the Pickler gives each string the next memo id when first written and refers to
// it by id after, in 2 bytes below id 256 and 5 above, so strings first met after thousands of
// stack frames would cost every event some 12 bytes more.
GenericDict aboutTheFile(const Names& names, GenericList device_names) {
  GenericList event_fields = newList();
  for (const IValue* key : {&names.key.action, &names.key.addr, &names.key.size, &names.key.stream,
                            &names.key.time_us, &names.key.frames}) {
    event_fields.push_back(*key);
  }
  GenericList event_actions = newList();
  for (const IValue* action :
       {&names.actions.segment_alloc, &names.actions.alloc, &names.actions.free_requested,
        &names.actions.free_completed, &names.actions.segment_free, &names.actions.segment_map,
        &names.actions.segment_unmap, &names.actions.oom}) {
    event_actions.push_back(*action);
  }
  GenericDict about = newDict();
  about.insert("schema", common::kMemoryVizSchema.tag());
  about.insert("devices", std::move(device_names));
  about.insert("event_fields", std::move(event_fields));
  about.insert("event_actions", std::move(event_actions));
  return about;
}

}  // namespace

std::string memoryVizPickle(const std::vector<VizDevice>& devices) {
  const PickleContext context;
  GenericList segments = newList();
  GenericList device_traces = newList();
  GenericList device_names = newList();
  for (std::size_t index = 0; index < devices.size(); ++index) {
    const VizDevice& device = devices[index];
    device_names.push_back(validUtf8(device.name));
    if (device.caching_allocator) {
      addCachingDevice(context, device, index, segments, device_traces);
    } else {
      addBlockDevice(context, device, index, segments, device_traces);
    }
  }
  GenericDict snapshot = newDict();
  snapshot.insert("memseal", aboutTheFile(context.names, std::move(device_names)));
  snapshot.insert("segments", std::move(segments));
  snapshot.insert("device_traces", std::move(device_traces));
  // As torch's snapshot records them (its key holds the settings string), so that `memseal
  // whatif` replays the run under its own settings first.
  GenericDict allocator_settings = newDict();
  allocator_settings.insert("PYTORCH_CUDA_ALLOC_CONF", explain::allocatorSettingsInEffect());
  snapshot.insert("allocator_settings", std::move(allocator_settings));
  return writePickle(snapshot);
}

}  // namespace memseal::report
