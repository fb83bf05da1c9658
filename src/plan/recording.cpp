// A recorded allocation's context carries the recording (shared, so the free may come after the
// region and even after the arena) and the real context and deleter it wraps.
#include "plan/recording.h"

#include <mutex>

namespace memseal::plan {

struct Recording {
  std::mutex mutex;
  std::uint32_t clock = 0;
  bool ended = false;
  RecordedRun run;
};

namespace {

struct RecordedAllocation {
  std::shared_ptr<Recording> recording;
  std::uint32_t index;
  void* original_context;
  c10::DeleterFnPtr original_deleter;
};

void recordedFree(void* context) {
  auto* allocation = static_cast<RecordedAllocation*>(context);
  {
    Recording& recording = *allocation->recording;
    std::lock_guard<std::mutex> lock(recording.mutex);
    if (!recording.ended) {
      recording.run.last_use[allocation->index] = recording.clock++;
      recording.run.freed[allocation->index] = true;
    }
  }
  allocation->original_deleter(allocation->original_context);
  delete allocation;
}

}  // namespace

RecordingRegion::RecordingRegion() : recording_(std::make_shared<Recording>()) {}

c10::DataPtr RecordingRegion::observe(c10::DataPtr allocation, std::size_t bytes) {
  void* data = allocation.get();
  if (data == nullptr) return allocation;
  auto* recorded =
      new RecordedAllocation{recording_, 0, allocation.get_context(), allocation.get_deleter()};
  {
    std::lock_guard<std::mutex> lock(recording_->mutex);
    RecordedRun& run = recording_->run;
    recorded->index = static_cast<std::uint32_t>(run.sizes.size());
    run.sizes.push_back(bytes);
    run.first_use.push_back(recording_->clock++);
    run.last_use.push_back(0);
    run.freed.push_back(false);
  }
  c10::Device device = allocation.device();
  allocation.release_context();
  return c10::DataPtr(data, recorded, &recordedFree, device);
}

RecordedRun RecordingRegion::finish() {
  std::lock_guard<std::mutex> lock(recording_->mutex);
  recording_->ended = true;
  return recording_->run;
}

}  // namespace memseal::plan
