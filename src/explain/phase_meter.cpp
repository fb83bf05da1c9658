#include "explain/phase_meter.h"

#include <torch/csrc/autograd/function.h>

#include <algorithm>

#include "track/memory_counters.h"

namespace memseal::explain {

PhaseMeter::PhaseMeter() {
  track::cpuCounters().resetPeak();
  track::setBackwardObserver(this);
  track::setGradFnObserver(this);
}

PhaseMeter::~PhaseMeter() {
  if (watching_) stopWatching();
}

void PhaseMeter::stopWatching() {
  track::setGradFnObserver(nullptr);
  track::setBackwardObserver(nullptr);
  watching_ = false;
}

std::int64_t PhaseMeter::takePeak() {
  track::MemoryCounters& counters = track::cpuCounters();
  std::int64_t peak = counters.peakBytes();
  counters.resetPeak();
  step_peak_ = std::max(step_peak_, peak);
  return peak;
}

void PhaseMeter::onGradFn(const track::TensorSignature&, std::int8_t, const track::NodeRef& node,
                          std::uint32_t) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_backward_) return;  // a later micro-batch's forward: part of backward's stretches
  std::int64_t peak = takePeak();
  if (forward_ops_ >= kMaxPhasesPerPass) {
    phases_.back().peak_bytes = std::max(phases_.back().peak_bytes, peak);
    return;
  }
  phases_.push_back({"forward:" + std::to_string(forward_ops_++) + ":" + node->name(), peak});
}

void PhaseMeter::onNodeStart(const track::NodeRef& node) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t peak = takePeak();
  if (!in_backward_) {
    phases_.push_back({"forward", peak});
    in_backward_ = true;
  } else {
    // What ran since the last node ended belongs to that node's stretch: another node follows.
    phases_.back().peak_bytes = std::max(phases_.back().peak_bytes, peak);
  }
  in_node_ = true;
  if (backward_nodes_ < kMaxPhasesPerPass) {
    phases_.push_back({"backward:" + std::to_string(backward_nodes_++) + ":" + node->name(), 0});
  }
}

void PhaseMeter::onNodeEnd(const track::NodeRef&) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_) return;
  phases_.back().peak_bytes = std::max(phases_.back().peak_bytes, takePeak());
  in_node_ = false;
}

std::vector<PhasePeak> PhaseMeter::finish() {
  stopWatching();
  std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t peak = takePeak();
  if (!in_backward_) return {};
  if (in_node_) phases_.back().peak_bytes = std::max(phases_.back().peak_bytes, peak);
  phases_.push_back({"update", in_node_ ? 0 : peak});
  return std::move(phases_);
}

}  // namespace memseal::explain
