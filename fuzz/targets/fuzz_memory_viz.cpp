// Any trace as the memory_viz writer's input (report/memory_viz.h): devices with and without a
// caching allocator, stacks whose frames have any bytes in their names, events of any action,
// address, size, stream and stack index, live blocks, and segments with blocks anywhere. What must
// hold: the writer refuses with std::out_of_range or std::invalid_argument and nothing else, or
// writes a pickle that libtorch's own unpickler reads back in the layout of torch's snapshot: one
// trace per device, as long as its events make it (on the CPU an alloc and a free_completed are two
// entries each), one segment per live block or given segment, each caching segment covered whole by
// its blocks, and every string valid UTF-8 (Python's pickle refuses any other).
#include <fuzzer/FuzzedDataProvider.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "report/memory_viz.h"

namespace {

using memseal::report::VizBlock;
using memseal::report::VizDevice;
using memseal::report::VizEvent;
using memseal::report::VizFrame;
using memseal::report::VizSegment;
using memseal::report::VizStack;

// Addresses near each other often enough for blocks to fall inside their segments.
std::uint64_t anAddress(FuzzedDataProvider& input) {
  if (input.ConsumeBool()) return input.ConsumeIntegral<std::uint64_t>();
  return 0x10000 + 0x100 * input.ConsumeIntegralInRange<std::uint64_t>(0, 64);
}

std::int64_t aSize(FuzzedDataProvider& input) {
  if (input.ConsumeBool()) return input.ConsumeIntegral<std::int64_t>();
  return 0x100 * input.ConsumeIntegralInRange<std::int64_t>(0, 16);
}

std::int32_t aStack(FuzzedDataProvider& input, std::size_t stacks) {
  return input.ConsumeIntegralInRange<std::int32_t>(-2, static_cast<std::int32_t>(stacks));
}

VizBlock aBlock(FuzzedDataProvider& input, std::size_t stacks) {
  VizBlock block;
  block.address = anAddress(input);
  block.size = aSize(input);
  block.stack = aStack(input, stacks);
  block.state =
      input.ConsumeBool() ? VizBlock::State::kActivePendingFree : VizBlock::State::kActiveAllocated;
  return block;
}

VizDevice aDevice(FuzzedDataProvider& input) {
  VizDevice device;
  device.name = input.ConsumeRandomLengthString(16);
  device.caching_allocator = input.ConsumeBool();
  device.stacks.resize(input.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (VizStack& stack : device.stacks) {
    stack.resize(input.ConsumeIntegralInRange<std::size_t>(0, 3));
    for (VizFrame& frame : stack) {
      frame.name = input.ConsumeRandomLengthString(24);
      frame.filename = input.ConsumeRandomLengthString(24);
      frame.line = input.ConsumeIntegral<int>();
    }
  }
  const std::size_t stacks = device.stacks.size();
  device.trace.resize(input.ConsumeIntegralInRange<std::size_t>(0, 48));
  for (VizEvent& event : device.trace) {
    // One past the last action: an action no writer knows.
    event.action = static_cast<VizEvent::Action>(input.ConsumeIntegralInRange<int>(0, 8));
    event.address = anAddress(input);
    event.size = aSize(input);
    event.time_us = input.ConsumeIntegral<std::int64_t>();
    event.stack = aStack(input, stacks);
    event.stream = input.ConsumeBool() ? 0 : input.ConsumeIntegral<std::uint64_t>();
    event.device_free = input.ConsumeIntegral<std::uint64_t>();
  }
  device.live.resize(input.ConsumeIntegralInRange<std::size_t>(0, 8));
  for (VizBlock& block : device.live) block = aBlock(input, stacks);
  device.segments.resize(input.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (VizSegment& segment : device.segments) {
    segment.address = anAddress(input);
    segment.size = aSize(input);
    segment.stream = input.ConsumeBool() ? 0 : input.ConsumeIntegral<std::uint64_t>();
    segment.expandable = input.ConsumeBool();
    segment.stack = aStack(input, stacks);
    segment.blocks.resize(input.ConsumeIntegralInRange<std::size_t>(0, 4));
    for (VizBlock& block : segment.blocks) block = aBlock(input, stacks);
  }
  return device;
}

void require(bool holds) {
  if (!holds) std::abort();
}

// Written apart from the writer's own repair of names (memory_viz.cpp), as the check of it.
bool validUtf8(const std::string& text) {
  for (std::size_t at = 0; at < text.size();) {
    auto lead = static_cast<unsigned char>(text[at]);
    std::size_t length = lead < 0x80             ? 1
                         : (lead & 0xE0) == 0xC0 ? 2
                         : (lead & 0xF0) == 0xE0 ? 3
                         : (lead & 0xF8) == 0xF0 ? 4
                                                 : 0;
    if (length == 0 || text.size() - at < length) return false;
    std::uint32_t code_point = length == 1 ? lead : lead & (0x7F >> length);
    for (std::size_t i = 1; i < length; ++i) {
      auto next = static_cast<unsigned char>(text[at + i]);
      if ((next & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    static const std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kSmallest[length] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    at += length;
  }
  return true;
}

void requireValidStrings(const c10::IValue& value) {
  if (value.isString()) {
    require(validUtf8(value.toStringRef()));
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) requireValidStrings(item);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      requireValidStrings(entry.key());
      requireValidStrings(entry.value());
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) requireValidStrings(item);
  }
}

const c10::IValue& field(const c10::IValue& dict, const char* key) {
  require(dict.isGenericDict());
  auto entries = dict.toGenericDict();
  auto found = entries.find(c10::IValue(key));
  require(found != entries.end());
  return found->value();
}

// A caching segment's blocks follow each other from its address to its end.
void requireCoveredWhole(const c10::IValue& segment) {
  std::int64_t cursor = field(segment, "address").toInt();
  for (const c10::IValue& block : field(segment, "blocks").toListRef()) {
    require(field(block, "address").toInt() == cursor);
    cursor += field(block, "size").toInt();
  }
  require(cursor == field(segment, "address").toInt() + field(segment, "total_size").toInt());
}

void requireSnapshotLayout(const c10::IValue& snapshot, const std::vector<VizDevice>& devices) {
  const auto& traces = field(snapshot, "device_traces").toListRef();
  require(traces.size() == devices.size());
  std::size_t segments_expected = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const VizDevice& device = devices[i];
    std::size_t entries = device.trace.size();
    if (!device.caching_allocator) {
      for (const VizEvent& event : device.trace) {
        entries += event.action == VizEvent::Action::kAlloc ||
                   event.action == VizEvent::Action::kFreeCompleted;
      }
    }
    require(traces[i].toListRef().size() == entries);
    segments_expected += device.caching_allocator ? device.segments.size() : device.live.size();
  }
  const auto& segments = field(snapshot, "segments").toListRef();
  require(segments.size() == segments_expected);
  for (const c10::IValue& segment : segments) {
    std::int64_t device = field(segment, "device").toInt();
    require(device >= 0 && static_cast<std::size_t>(device) < devices.size());
    if (devices[device].caching_allocator) requireCoveredWhole(segment);
  }
  requireValidStrings(snapshot);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  std::vector<VizDevice> devices(input.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (VizDevice& device : devices) device = aDevice(input);
  std::string pickle;
  try {
    pickle = memseal::report::memoryVizPickle(devices);
  } catch (const std::out_of_range&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  }
  requireSnapshotLayout(torch::jit::unpickle(pickle.data(), pickle.size()), devices);
  return 0;
}
