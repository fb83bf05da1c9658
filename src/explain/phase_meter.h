// The peak of each phase of one step, from the live-bytes counter, the ops that record autograd
// history and backward's nodes as they run. The moment of a step's peak moves with size: before
// zero_grad frees last step's gradients at small batches and at the end of forward at large ones;
// at a weight's gradient or at the saved activations in backward; in the optimizer's update. So a
// step is cut where ops end, and each stretch is a phase of its own, fitted apart:
//   "forward:K:Node"   up to the end of forward's K-th op output with a grad_fn (Node's name),
//   "forward"          the rest of forward, up to backward's first node,
//   "backward:K:Node"  backward's K-th node, from its start to the next node's start,
//   "update"           after backward's last node (the optimizer's step and what follows).
// The same step at another size runs the same ops in the same order, so the phases line up.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "explain/phase_names.h"
#include "memseal/fit.h"
#include "track/grad_fn_observer.h"

namespace memseal::explain {

class PhaseMeter final : public track::BackwardObserver, public track::GradFnObserver {
 public:
  // Stretches beyond this, in forward and in backward each, join the last one.
  static constexpr std::size_t kMaxPhasesPerPass = 4096;

  // Installs itself as the backward and grad_fn observer until finish (one at a time,
  // process-wide) and starts the step's peak from what is live now.
  PhaseMeter();
  ~PhaseMeter() override;
  PhaseMeter(const PhaseMeter&) = delete;
  PhaseMeter& operator=(const PhaseMeter&) = delete;

  void onNodeStart(const track::NodeRef& node) override;
  void onNodeEnd(const track::NodeRef& node) override;
  void onGradFn(const track::TensorSignature& output, std::int8_t cuda_device,
                const track::NodeRef& node, std::uint32_t site) override;

  // Stops watching; the phases' peaks in order, none when backward never ran.
  std::vector<PhasePeak> finish();
  // The step's peak, whatever its phases (after finish).
  std::int64_t stepPeak() const { return step_peak_; }

 private:
  // The counter's peak since the last call, starting the next stretch from what is live now.
  std::int64_t takePeak();
  void stopWatching();

  std::mutex mutex_;
  std::int64_t step_peak_ = 0;
  std::vector<PhasePeak> phases_;
  std::size_t forward_ops_ = 0;
  std::size_t backward_nodes_ = 0;
  bool in_backward_ = false;
  bool in_node_ = false;
  bool watching_ = true;
};

}  // namespace memseal::explain
