// Recording a region's first run: every CPU allocation the system allocator makes inside it is
// wrapped to learn its size, order and, if it is freed before the region ends, when.
#pragma once

#include <cstddef>
#include <memory>

#include "plan/arena_plan.h"
#include "track/arena_region.h"

namespace memseal::plan {

struct Recording;

class RecordingRegion final : public track::ArenaRegion {
 public:
  RecordingRegion();

  c10::DataPtr serve(std::size_t) override { return {}; }
  c10::DataPtr observe(c10::DataPtr allocation, std::size_t bytes) override;

  // Stops recording (later frees are of outputs) and returns what was recorded.
  RecordedRun finish();

 private:
  std::shared_ptr<Recording> recording_;
};

}  // namespace memseal::plan
