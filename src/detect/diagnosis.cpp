// The hints quote the fixes of PyTorch's FAQ ("Don't accumulate history across your training
// loop") and TorchSharp's memory guide, in C++ first and Python second.
#include "detect/diagnosis.h"

#include <sstream>

namespace memseal::detect {

namespace {

std::string shapeText(const TensorInfo& tensor) {
  std::ostringstream text;
  text << "[";
  for (std::size_t i = 0; i < tensor.shape.size(); ++i) text << (i ? ", " : "") << tensor.shape[i];
  text << "]";
  return text.str();
}

std::string madeBy(const LeakFinding& finding) {
  std::string op = finding.site.outer_op.empty() ? finding.site.op : finding.site.outer_op;
  return op.empty() ? std::string("an allocation") : op;
}

}  // namespace

LeakCategory categorize(const TensorInfo& tensor, bool backward_ran) {
  if (tensor.known && tensor.requires_grad && tensor.is_leaf) {
    return LeakCategory::kParametersCreatedPerStep;
  }
  if (tensor.known && (tensor.requires_grad || !tensor.grad_fn.empty())) {
    return backward_ran ? LeakCategory::kAutogradGraphRetained
                        : LeakCategory::kGradEnabledInference;
  }
  return LeakCategory::kTensorsRetained;
}

std::string hintFor(const LeakFinding& finding) {
  const TensorInfo& tensor = finding.tensor;
  std::string grad_fn =
      tensor.grad_fn.empty() ? std::string() : " (grad_fn " + tensor.grad_fn + ")";
  switch (finding.category) {
    case LeakCategory::kAutogradGraphRetained:
      return "A result with autograd history" + grad_fn + ", made by " + madeBy(finding) +
             ", is kept from one step to the next, so every step's autograd graph stays alive "
             "behind it (`total_loss += loss`, `losses.push_back(loss)`). Keep a plain number "
             "instead: `total_loss += loss.item<float>()`, or a tensor without history: "
             "`loss.detach()`. Python: `total_loss += loss.item()`.";
    case LeakCategory::kGradEnabledInference:
      return "This loop never runs backward, yet its outputs carry autograd history" + grad_fn +
             ", made by " + madeBy(finding) +
             ", and each kept output holds the activations of its whole forward pass. Run "
             "inference with gradients off: `c10::InferenceMode guard;` or "
             "`torch::NoGradGuard no_grad;` around the forward pass (Python: "
             "`with torch.inference_mode():` or `torch.no_grad()`), or keep `output.detach()`.";
    case LeakCategory::kParametersCreatedPerStep:
      return "New parameters (leaf tensors with requires_grad, shape " + shapeText(tensor) +
             ") are created by " + madeBy(finding) +
             " every step and kept: a module is being constructed inside the loop. Build "
             "modules once, before the loop, and reuse them; if a fresh module is really "
             "needed, drop the old one (and its optimizer) before making the next.";
    case LeakCategory::kTensorsRetained:
      return "Tensors of shape " + shapeText(tensor) + " made by " + madeBy(finding) +
             " are kept across steps and never freed: a container or a cache keyed by input "
             "keeps growing. Bound it (a fixed-capacity cache that evicts), clear it every step, "
             "or keep only what you need (`t.item<float>()`, or `t.clone()` of a small slice).";
    case LeakCategory::kUntrackedGrowth:
      return "Resident memory grows every step but tensor memory does not: the leak is outside "
             "tensor storage (C++ containers, Python objects, a native library's own buffers). "
             "memseal sees libtorch's CPU tensor allocator only. Run the loop under heaptrack or "
             "`valgrind --tool=massif` (Python: tracemalloc or memray) to find the allocating "
             "code.";
  }
  return "";
}

}  // namespace memseal::detect
