// The hints quote the fixes of PyTorch's FAQ ("Don't accumulate history across your training
// loop") and TorchSharp's memory guide, in C++ first and Python second.
#include "detect/diagnosis.h"

#include <cstring>
#include <sstream>

#include "common/text.h"
#include "track/pool_leases.h"

namespace memseal::detect {

namespace {

std::string madeBy(const AllocationSite& site) {
  std::string op = site.outer_op.empty() ? site.op : site.outer_op;
  return op.empty() ? std::string("an allocation") : common::shownOpName(op);
}

// " of shape [16, 64]" or " of shapes [1..57, 64] (23 distinct shapes)"; empty when unknown.
std::string shapesOf(const LeakFinding& finding) {
  if (!finding.shapes.min.empty() && finding.shapes.distinct > 1) {
    return " of shapes " + shapeRangeText(finding.shapes);
  }
  if (!finding.tensor.known) return "";
  return " of shape " + common::shapeText(finding.tensor.shape);
}

// "weight [64, 64], bias [64]" style list of the parts' tensors (at most four).
std::string partShapes(const LeakFinding& finding) {
  std::string text;
  std::size_t shown = 0;
  for (const LeakPart& part : finding.parts) {
    if (part.retained != "tensor storage" || !part.tensor.known) continue;
    if (shown == 4) {
      text += ", ...";
      break;
    }
    text += (shown++ ? ", " : "") + common::shapeText(part.tensor.shape);
  }
  return text;
}

}  // namespace

std::string shapeRangeText(const ShapeRange& shapes) {
  if (shapes.min.empty() || shapes.min.size() != shapes.max.size()) return "";
  std::string text = "[";
  for (std::size_t i = 0; i < shapes.min.size(); ++i) {
    text += i ? ", " : "";
    text += std::to_string(shapes.min[i]);
    if (shapes.max[i] != shapes.min[i]) text += ".." + std::to_string(shapes.max[i]);
  }
  text += "]";
  if (shapes.distinct > 1) {
    text += " (" + std::to_string(shapes.distinct) + (shapes.distinct >= 64 ? " or more" : "") +
            " distinct shapes)";
  }
  return text;
}

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
  std::size_t storage_parts = 0;
  for (const LeakPart& part : finding.parts) storage_parts += part.retained == "tensor storage";
  switch (finding.category) {
    case LeakCategory::kAutogradGraphRetained:
      return "A result with autograd history" + grad_fn + ", made by " + madeBy(finding.site) +
             ", is kept from one step to the next, so every step's autograd graph stays alive "
             "behind it (`total_loss += loss`, `losses.push_back(loss)`). Keep a plain number "
             "instead: `total_loss += loss.item<float>()`, or a tensor without history: "
             "`loss.detach()`. Python: `total_loss += loss.item()`.";
    case LeakCategory::kGradEnabledInference:
      return "This loop never runs backward, yet its outputs carry autograd history" + grad_fn +
             ", made by " + madeBy(finding.site) + ", and each kept output holds the " +
             (storage_parts > 1 ? "activations of " + std::to_string(storage_parts) +
                                      " ops listed above (its whole forward pass)"
                                : std::string("activations of its whole forward pass")) +
             ". Run inference with gradients off: `c10::InferenceMode guard;` or "
             "`torch::NoGradGuard no_grad;` around the forward pass (Python: "
             "`with torch.inference_mode():` or `torch.no_grad()`), or keep `output.detach()`.";
    case LeakCategory::kParametersCreatedPerStep: {
      std::string shapes = partShapes(finding);
      return "New parameters (leaf tensors with requires_grad: " +
             (shapes.empty() ? common::shapeText(tensor.shape) : shapes) + ") are created by " +
             madeBy(finding.site) +
             " every step and kept: a module is being constructed inside the loop. Build "
             "modules once, before the loop, and reuse them; if a fresh module is really "
             "needed, drop the old one (and its optimizer) before making the next.";
    }
    case LeakCategory::kTensorsRetained:
      if (finding.site.op.rfind(track::kPoolLeaseOpPrefix, 0) == 0) {
        return "Leases of pool class " +
               finding.site.op.substr(std::strlen(track::kPoolLeaseOpPrefix) + 1) +
               " are taken and kept across steps: their buffers never go back to the pool, "
               "which grows (PoolExhaustion::kGrow) or runs out. A lease gives its buffer back "
               "when it is destroyed: let it end with the request (a local TensorLease), or "
               "clear the container that keeps leases; to keep a result, copy it out "
               "(`lease->clone()`) and let the lease go.";
      }
      return "Tensors" + shapesOf(finding) + " made by " + madeBy(finding.site) +
             " are kept across steps and never freed: a container or a cache keyed by input " +
             (finding.shapes.distinct > 1 ? "size (a new shape keeps adding entries)" : "") +
             (finding.shapes.distinct > 1 ? "" : "keeps growing") +
             ". Bound it (a fixed-capacity cache that evicts), clear it every step, or keep "
             "only what you need (`t.item<float>()`, or `t.clone()` of a small slice).";
    case LeakCategory::kUntrackedGrowth:
      if (finding.retained == "private memory") {
        // A forked child's (DetectorOptions::forked_from_pid).
        return "Private memory of this forked child grows beyond what its tensors explain: it is "
               "writing pages it shares with its parent (copy-on-write). Python writes an object "
               "on every read (its reference count), so a worker that reads a dataset held as "
               "Python lists, dicts or strings copies the parent's dataset page by page, in every "
               "worker. Keep the dataset in a few large objects (numpy arrays or tensors, strings "
               "packed into one array), or load it inside each worker (DataLoader "
               "worker_init_fn).";
      }
      return "Resident memory grows every step beyond what tracked tensors and autograd graphs "
             "explain: the leak is outside tensor storage (C++ containers, Python objects, a "
             "native library's own buffers). memseal sees libtorch's CPU tensor allocator "
             "only. Run the loop under heaptrack or `valgrind --tool=massif` (Python: "
             "tracemalloc or memray) to find the allocating code.";
    case LeakCategory::kCreateGraphCycle:
      return "Parameters' gradients carry autograd history" + grad_fn +
             ": `backward(create_graph=true)` accumulated into `.grad`, which makes the cycle "
             "parameter -> .grad -> grad_fn -> ... -> AccumulateGrad -> parameter that "
             "reference counting never frees, and every step's graph stays alive inside it. Take "
             "higher-order gradients with `torch::autograd::grad({loss}, params, {}, "
             "/*retain_graph=*/true, /*create_graph=*/true)` instead (Python: "
             "`torch.autograd.grad(..., create_graph=True)`), or reset the gradients after use: "
             "`p.mutable_grad().reset()` for every parameter (Python: `p.grad = None`, or "
             "`optimizer.zero_grad(set_to_none=True)`).";
  }
  return "";
}

}  // namespace memseal::detect

namespace memseal {

const char* categoryId(LeakCategory category) {
  switch (category) {
    case LeakCategory::kAutogradGraphRetained:
      return "autograd-graph-retained";
    case LeakCategory::kGradEnabledInference:
      return "grad-enabled-inference";
    case LeakCategory::kParametersCreatedPerStep:
      return "parameters-created-per-step";
    case LeakCategory::kTensorsRetained:
      return "tensors-retained";
    case LeakCategory::kUntrackedGrowth:
      return "untracked-growth";
    case LeakCategory::kCreateGraphCycle:
      return "create-graph-cycle";
  }
  return "unknown";
}

}  // namespace memseal
