// Each estimate keeps to what the peak shows:
// - checkpointing a module frees the activations made inside it and saved for backward, except the
//   last one it made (its output, which the next module may save as its input); a module holding
//   nearly all activations only moves the peak into its recomputation, so the root is not offered;
// - gradients live at the peak from before the step that backward had not yet accumulated into are
//   what zero_grad(set_to_none=True) before the forward frees;
// - an optimizer whose state is about twice the parameters (Adam's two moments) keeps half of it
//   with one state per parameter (SGD with momentum);
// - activations in 32-bit floats take half the bytes in bfloat16 (up to: autocast lowers the
//   outputs of matmuls and convolutions, not every op);
// - temporaries live at the peak made by an elementwise op inside a module's forward (where an
//   in-place variant exists and the user wrote the call): an in-place variant removes up to the
//   largest op's share;
// - tensors of no role made before the step and freed during it were kept from the previous step
//   until the program replaced them.
#include "explain/peak_remedies.h"

#include <algorithm>
#include <map>

namespace memseal::explain {

namespace {

constexpr std::size_t kModulesOffered = 3;

// "Net/encoder/0" -> {"Net", "Net/encoder", "Net/encoder/0"}.
std::vector<std::string> modulePathAndAncestors(const std::string& module) {
  std::vector<std::string> paths;
  for (std::size_t slash = module.find('/'); slash != std::string::npos;
       slash = module.find('/', slash + 1)) {
    paths.push_back(module.substr(0, slash));
  }
  if (!module.empty()) paths.push_back(module);
  return paths;
}

void addCheckpointing(const std::vector<PeakHolding>& holdings, std::vector<PeakRemedy>& out) {
  struct Saved {
    std::int64_t bytes = 0;
    std::int64_t last_bytes = 0;  // the activation made last inside the module: its output
    std::int64_t last_made_at = -2;
  };
  std::map<std::string, Saved> by_module;
  std::int64_t all_activations = 0;
  for (const PeakHolding& holding : holdings) {
    if (holding.role != MemoryRole::kActivations) continue;
    all_activations += holding.bytes;
    for (const std::string& path : modulePathAndAncestors(holding.module)) {
      Saved& saved = by_module[path];
      saved.bytes += holding.bytes;
      if (holding.made_at > saved.last_made_at) {
        saved.last_made_at = holding.made_at;
        saved.last_bytes = holding.bytes;
      }
    }
  }
  std::vector<PeakRemedy> candidates;
  for (const auto& [module, saved] : by_module) {
    bool root = module.find('/') == std::string::npos;
    std::int64_t freed = saved.bytes - saved.last_bytes;
    if (root || freed <= 0 || freed * 10 > all_activations * 9) continue;
    candidates.push_back({"checkpoint-module", module, freed, false,
                          "wrap " + module + "'s forward in torch.utils.checkpoint.checkpoint",
                          "its forward runs again in backward (recomputation)"});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const PeakRemedy& a, const PeakRemedy& b) { return a.bytes > b.bytes; });
  if (candidates.size() > kModulesOffered) candidates.resize(kModulesOffered);
  out.insert(out.end(), candidates.begin(), candidates.end());
}

std::int64_t sumOf(const std::vector<PeakHolding>& holdings, bool (*selected)(const PeakHolding&)) {
  std::int64_t bytes = 0;
  for (const PeakHolding& holding : holdings) {
    if (selected(holding)) bytes += holding.bytes;
  }
  return bytes;
}

void addStepRemedies(const std::vector<PeakHolding>& holdings, std::int64_t parameter_bytes,
                     std::vector<PeakRemedy>& out) {
  std::int64_t stale_gradients = sumOf(holdings, [](const PeakHolding& h) {
    return h.role == MemoryRole::kGradients && !h.made_in_step && !h.accumulated_before_peak;
  });
  out.push_back({"gradients-to-none", "", stale_gradients, false,
                 "optimizer.zero_grad(set_to_none=True) before the forward (not after it), so "
                 "last step's gradients are freed before the peak",
                 "none: backward makes each gradient anew"});
  std::int64_t state =
      sumOf(holdings, [](const PeakHolding& h) { return h.role == MemoryRole::kOptimizerState; });
  if (parameter_bytes > 0 && state * 2 >= parameter_bytes * 3) {
    out.push_back({"smaller-optimizer-state", "", state / 2, false,
                   "an optimizer with one state tensor per parameter (SGD with momentum) instead "
                   "of two (Adam's moments), or 8-bit optimizer state",
                   "convergence: tune the learning rate again"});
  }
  std::int64_t float_activations = sumOf(holdings, [](const PeakHolding& h) {
    return h.role == MemoryRole::kActivations && (h.dtype == "Float" || h.dtype == "float32");
  });
  out.push_back({"lower-precision-activations", "", float_activations / 2, true,
                 "run the forward under torch.autocast(..., dtype=torch.bfloat16)",
                 "precision: bfloat16 keeps float32's range with an 8-bit mantissa"});
  std::int64_t kept = sumOf(holdings, [](const PeakHolding& h) {
    return h.role == MemoryRole::kOther && !h.made_in_step && h.freed_in_step;
  });
  out.push_back({"free-previous-step", "", kept, false,
                 "del the previous step's outputs and losses (or let them go out of scope) at "
                 "the end of each step: they are held until this step replaces them",
                 "none"});
}

// Elementwise ops with an in-place variant (op_) that a model's forward commonly calls.
bool hasInPlaceVariant(const std::string& op) {
  static const char* const kOps[] = {
      "aten::add",       "aten::sub",         "aten::mul",      "aten::div",  "aten::relu",
      "aten::clamp_min", "aten::clamp",       "aten::sigmoid",  "aten::tanh", "aten::exp",
      "aten::neg",       "aten::leaky_relu",  "aten::hardtanh", "aten::elu",  "aten::silu",
      "aten::dropout",   "aten::masked_fill", "aten::pow"};
  for (const char* known : kOps) {
    if (op == known) return true;
  }
  return false;
}

void addInPlace(const std::vector<PeakHolding>& holdings, std::vector<PeakRemedy>& out) {
  std::map<std::string, std::int64_t> by_op;
  for (const PeakHolding& holding : holdings) {
    if (holding.role == MemoryRole::kTemporaries && !holding.module.empty() &&
        hasInPlaceVariant(holding.op)) {
      by_op[holding.op] += holding.bytes;
    }
  }
  auto largest = std::max_element(by_op.begin(), by_op.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  if (largest == by_op.end()) return;
  out.push_back({"in-place-temporaries", largest->first, largest->second, true,
                 "an in-place variant of " + largest->first +
                     " (or freeing its input sooner), where nothing else reads the input",
                 "an in-place op on a tensor autograd saved fails in backward"});
}

}  // namespace

std::vector<PeakRemedy> peakRemedies(const std::vector<PeakHolding>& holdings,
                                     std::int64_t parameter_bytes) {
  std::vector<PeakRemedy> remedies;
  addCheckpointing(holdings, remedies);
  addStepRemedies(holdings, parameter_bytes, remedies);
  addInPlace(holdings, remedies);
  remedies.erase(std::remove_if(remedies.begin(), remedies.end(),
                                [](const PeakRemedy& remedy) { return remedy.bytes <= 0; }),
                 remedies.end());
  std::stable_sort(remedies.begin(), remedies.end(),
                   [](const PeakRemedy& a, const PeakRemedy& b) { return a.bytes > b.bytes; });
  return remedies;
}

}  // namespace memseal::explain
