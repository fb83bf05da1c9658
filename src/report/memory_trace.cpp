// MemoryTrace: the event ring of track/event_trace.h between start() and stop(), the allocations
// live at stop(), the CUDA caching allocator's events and segments (track/device_events.h), and
// their conversion into what PyTorch's memory viewer reads.
//
// Device order in device_traces: torch indexes it by CUDA ordinal, so position N is cuda:N for
// every N up to the highest ordinal seen (an ordinal with no events gets an empty trace), and the
// CPU comes right after them (position 0 when no CUDA device was seen). The "memseal" entry names
// every position.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "analyze/live_view.h"
#include "memseal/html.h"
#include "memseal/memory_trace.h"
#include "report/memory_viz.h"
#include "track/device_events.h"
#include "track/event_trace.h"
#include "track/thread_state.h"

namespace memseal {

struct MemoryTrace::Data {
  track::TraceContents contents;
  track::DeviceTraceContents device_contents;
  std::vector<track::LiveRecord> live;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::int64_t live_bytes = 0;
};

namespace {

// The frames the viewer shows for a site: the op first (memory_viz shows the innermost frames),
// then the program's own frames, or every frame when none is the program's.
report::VizStack vizStackOf(const AllocationSite& site) {
  report::VizStack stack;
  std::string op = site.op.empty() ? site.outer_op : site.op;
  stack.push_back({op.empty() ? std::string("<no op>") : op,
                   site.scope.empty() ? std::string("<aten>") : site.scope, 0});
  bool any_user_frame = false;
  for (const StackFrame& frame : site.frames) any_user_frame |= !frame.is_internal;
  for (const StackFrame& frame : site.frames) {
    if (any_user_frame && frame.is_internal) continue;
    stack.push_back({frame.function.empty() ? std::string("??") : frame.function,
                     frame.file.empty() ? frame.library : frame.file, frame.line});
  }
  return stack;
}

// A CUDA site has no stack (it is taken under the allocator's lock): one frame, the op (and the op
// that called it, as deviceSiteLabel names them) with the scope as its file. Read from the site
// table directly: describeSite would symbolize a stack that another allocation of the site took.
report::VizStack cudaStackOf(std::uint32_t site) {
  track::DeviceSiteName name = track::deviceSiteName(site);
  return {{name.op, name.scope.empty() ? std::string("<aten>") : name.scope, 0}};
}

report::VizEvent::Action vizAction(track::DeviceEventKind kind) {
  using Action = report::VizEvent::Action;
  switch (kind) {
    case track::DeviceEventKind::kSegmentAlloc:
      return Action::kSegmentAlloc;
    case track::DeviceEventKind::kSegmentFree:
      return Action::kSegmentFree;
    case track::DeviceEventKind::kSegmentMap:
      return Action::kSegmentMap;
    case track::DeviceEventKind::kSegmentUnmap:
      return Action::kSegmentUnmap;
    case track::DeviceEventKind::kBlockAlloc:
      return Action::kAlloc;
    case track::DeviceEventKind::kBlockFreeRequested:
      return Action::kFreeRequested;
    case track::DeviceEventKind::kBlockFreeCompleted:
      return Action::kFreeCompleted;
    case track::DeviceEventKind::kOutOfMemory:
      return Action::kOom;
  }
  return Action::kOom;
}

// One VizDevice per CUDA ordinal from 0 to the highest seen, each holding its segments at stop and
// its events of the trace.
std::vector<report::VizDevice> cudaDevices(const track::DeviceTraceContents& contents) {
  int highest = -1;
  for (const auto& device : contents.devices) highest = std::max(highest, device.device);
  for (const auto& event : contents.events) highest = std::max(highest, event.device);
  std::vector<report::VizDevice> devices(static_cast<std::size_t>(highest + 1));
  std::vector<std::unordered_map<std::uint32_t, std::int32_t>> stack_of_site(devices.size());
  auto stackIndex = [&](std::size_t device, std::uint32_t site) {
    auto found = stack_of_site[device].find(site);
    if (found != stack_of_site[device].end()) return found->second;
    auto index = static_cast<std::int32_t>(devices[device].stacks.size());
    devices[device].stacks.push_back(cudaStackOf(site));
    stack_of_site[device].emplace(site, index);
    return index;
  };
  for (std::size_t index = 0; index < devices.size(); ++index) {
    devices[index].name = "cuda:" + std::to_string(index);
    devices[index].caching_allocator = true;
  }
  for (const auto& device : contents.devices) {
    if (device.device < 0) continue;
    auto index = static_cast<std::size_t>(device.device);
    for (const track::LiveSegment& live : device.segments) {
      report::VizSegment segment;
      segment.address = live.address;
      segment.size = static_cast<std::int64_t>(live.bytes);
      segment.stream = live.stream;
      segment.expandable = live.expandable;
      segment.stack = stackIndex(index, live.site);
      for (const track::LiveBlockSummary& block : live.blocks) {
        segment.blocks.push_back(
            {block.address, static_cast<std::int64_t>(block.bytes), stackIndex(index, block.site),
             block.free_requested ? report::VizBlock::State::kActivePendingFree
                                  : report::VizBlock::State::kActiveAllocated});
      }
      devices[index].segments.push_back(std::move(segment));
    }
  }
  // Frees and unmaps carry no site: they take the stack of what they release, as torch's do.
  std::vector<std::unordered_map<std::uint64_t, std::int32_t>> stack_at(devices.size());
  for (const track::DeviceMemoryEvent& event : contents.events) {
    if (event.device < 0) continue;
    auto index = static_cast<std::size_t>(event.device);
    report::VizEvent viz;
    viz.action = vizAction(event.kind);
    viz.address = event.address;
    viz.size = static_cast<std::int64_t>(event.bytes);
    viz.time_us = event.time_ns / 1000;
    viz.stream = event.stream;
    viz.device_free = event.device_free_bytes;
    switch (event.kind) {
      case track::DeviceEventKind::kBlockAlloc:
      case track::DeviceEventKind::kSegmentAlloc:
      case track::DeviceEventKind::kSegmentMap:
      case track::DeviceEventKind::kOutOfMemory:
        viz.stack = stackIndex(index, event.site);
        if (event.kind != track::DeviceEventKind::kOutOfMemory) {
          stack_at[index][event.address] = viz.stack;
        }
        break;
      default: {
        auto found = stack_at[index].find(event.address);
        viz.stack = found != stack_at[index].end() ? found->second : -1;
        break;
      }
    }
    devices[index].trace.push_back(viz);
  }
  return devices;
}

}  // namespace

MemoryTrace::MemoryTrace(std::size_t max_events) : max_events_(max_events), data_(new Data()) {
  if (max_events_ == 0) throw std::invalid_argument("memseal: a memory trace needs max_events > 0");
}

MemoryTrace::~MemoryTrace() {
  if (running_) {
    track::stopEventTrace();
    track::stopDeviceEventTrace();
  }
  delete data_;
}

void MemoryTrace::start() {
  if (running_) return;
  if (track::eventTraceRunning()) {
    throw std::logic_error("memseal: another allocation trace (MemoryTrace or explain) runs");
  }
  if (!track::startEventTrace(max_events_, /*prefault=*/true)) {
    throw std::runtime_error("memseal: the allocation trace could not start (another runs, or " +
                             std::to_string(max_events_) + " events do not fit in memory)");
  }
  // CUDA events go to their own ring, as many as the CPU's (pages touched only as they come).
  track::startDeviceEventTrace(max_events_);
  running_ = true;
}

void MemoryTrace::stop() {
  if (!running_) return;
  running_ = false;
  track::TrackerWork work;
  data_->contents = track::stopEventTrace();
  data_->device_contents = track::stopDeviceEventTrace();
  data_->allocations = 0;
  data_->frees = 0;
  for (const track::TraceEvent& event : data_->contents.events) {
    ++(event.kind == track::TraceEvent::kAllocation ? data_->allocations : data_->frees);
  }
  data_->live.clear();
  data_->live_bytes = 0;
  analyze::forEachLiveRecord([&](const track::LiveRecord& record) {
    data_->live.push_back(record);
    data_->live_bytes += static_cast<std::int64_t>(record.bytes);
  });
}

std::uint64_t MemoryTrace::allocations() const { return data_->allocations; }
std::uint64_t MemoryTrace::frees() const { return data_->frees; }
std::uint64_t MemoryTrace::dropped() const {
  return data_->contents.dropped + data_->device_contents.dropped;
}
std::int64_t MemoryTrace::liveBytes() const { return data_->live_bytes; }
std::size_t MemoryTrace::liveCount() const { return data_->live.size(); }

std::string MemoryTrace::memoryVizPickle() {
  stop();
  track::TrackerWork work;
  report::VizDevice device;
  device.name = "cpu";
  std::unordered_map<std::uint32_t, std::int32_t> stack_of_site;
  auto stackIndex = [&](std::uint32_t site) {
    auto found = stack_of_site.find(site);
    if (found != stack_of_site.end()) return found->second;
    auto index = static_cast<std::int32_t>(device.stacks.size());
    device.stacks.push_back(vizStackOf(analyze::describeSite(site)));
    stack_of_site.emplace(site, index);
    return index;
  };
  for (const track::LiveRecord& record : data_->live) {
    device.live.push_back({reinterpret_cast<std::uintptr_t>(record.data),
                           static_cast<std::int64_t>(record.bytes), stackIndex(record.site)});
  }
  device.trace.reserve(data_->contents.events.size() * 2);
  for (const track::TraceEvent& event : data_->contents.events) {
    report::VizEvent viz;
    viz.address = reinterpret_cast<std::uintptr_t>(event.data);
    viz.size = event.bytes;
    viz.time_us = event.time_ns / 1000;
    viz.stack = stackIndex(event.site);
    if (event.kind == track::TraceEvent::kAllocation) {
      viz.action = report::VizEvent::Action::kAlloc;
      device.trace.push_back(viz);
    } else {
      // CPU memory is free as soon as it is released: both halves of a CUDA free at once.
      viz.action = report::VizEvent::Action::kFreeRequested;
      device.trace.push_back(viz);
      viz.action = report::VizEvent::Action::kFreeCompleted;
      device.trace.push_back(viz);
    }
  }
  std::vector<report::VizDevice> devices = cudaDevices(data_->device_contents);
  devices.push_back(std::move(device));
  return report::memoryVizPickle(devices);
}

void MemoryTrace::writeMemoryViz(const std::string& path) {
  writeReportFile(path, memoryVizPickle());
}

}  // namespace memseal
