// MemoryTrace: the event ring of track/event_trace.h between start() and stop(), the allocations
// live at stop(), and their conversion into what PyTorch's memory viewer reads.
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "analyze/live_view.h"
#include "memseal/explain.h"
#include "report/memory_viz.h"
#include "track/event_trace.h"
#include "track/thread_state.h"

namespace memseal {

struct MemoryTrace::Data {
  track::TraceContents contents;
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

}  // namespace

MemoryTrace::MemoryTrace(std::size_t max_events) : max_events_(max_events), data_(new Data()) {
  if (max_events_ == 0) throw std::invalid_argument("memseal: a memory trace needs max_events > 0");
}

MemoryTrace::~MemoryTrace() {
  if (running_) track::stopEventTrace();
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
  running_ = true;
}

void MemoryTrace::stop() {
  if (!running_) return;
  running_ = false;
  track::TrackerWork work;
  data_->contents = track::stopEventTrace();
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
std::uint64_t MemoryTrace::dropped() const { return data_->contents.dropped; }
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
  return report::memoryVizPickle({device});
}

void MemoryTrace::writeMemoryViz(const std::string& path) {
  writeReportFile(path, memoryVizPickle());
}

}  // namespace memseal
