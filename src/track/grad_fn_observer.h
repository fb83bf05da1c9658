// What the leak detector (detect/) sees of autograd from the hot path: every op output that has
// autograd history, and how many backward functions ran. The detector implements the observer.
#pragma once

#include <cstdint>

#include "track/autograd_node.h"
#include "track/live_record.h"

namespace memseal::track {

// Called on the thread that ran the op, from inside the op observer, for outputs with a grad_fn
// made while grad mode is on and ops are watched. `site` is the op's allocation site;
// `cuda_device` the output's CUDA device, -1 for the CPU.
class GradFnObserver {
 public:
  virtual ~GradFnObserver() = default;
  virtual void onGradFn(const TensorSignature& output, std::int8_t cuda_device, const NodeRef& node,
                        std::uint32_t site) = 0;
};

// One observer at a time. Setting nullptr waits until no thread is inside the old one, so it can
// be destroyed afterwards.
void setGradFnObserver(GradFnObserver* observer);

// Backward functions (autograd nodes) executed, ever: tells whether a loop runs backward.
std::uint64_t backwardFunctionsRun();

}  // namespace memseal::track

namespace memseal::track {

// Told when the autograd engine starts and finishes evaluating a node (its
// "autograd::engine::evaluate_function: ..." op), on the thread evaluating it, with the tracker's
// recursion guard set. Explain uses it to read, by identity, what a graph saved for backward (when
// backward begins every saved tensor is still held) and the .grad each AccumulateGrad leaves.
// Needs ops watched.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void onNodeStart(const NodeRef& node) = 0;
  virtual void onNodeEnd(const NodeRef& node) = 0;
};

// One at a time; setting nullptr waits until no thread is inside the old one.
void setBackwardObserver(BackwardObserver* observer);

}  // namespace memseal::track
