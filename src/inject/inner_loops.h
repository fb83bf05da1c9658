// Loops found to lie inside a longer iteration (a layer's ops, a data loader's loop over a batch's
// samples, a recurrent model's time steps): their ops never start an iteration, and each run of
// them on a thread is seen as one op (kInnerLoopRun), so that the iterations around them are alike
// however many times they ran it. Pure: no lock, no torch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "inject/step_tuning.h"

namespace memseal::inject {

class InnerLoops {
 public:
  // Ops that never start an iteration found from now on.
  const std::vector<std::uint32_t>& ops() const { return ops_; }
  bool has(std::uint32_t id) const { return std::find(ops_.begin(), ops_.end(), id) != ops_.end(); }
  std::size_t size() const { return ops_.size(); }
  // Adds `op` (once) to them.
  void add(std::uint32_t op) {
    if (!has(op)) ops_.push_back(op);
  }

  // Whether op `id` may start an iteration: a real op, outside every inner loop.
  bool mayStartIteration(std::uint32_t id) const {
    return id != kOtherOps && id != kInnerLoopRun && !has(id);
  }

  // Op `id` on `thread` as the iterations see it: kInnerLoopRun for the first op of a run of inner
  // loops' ops. False: `id` goes on such a run and is not seen at all.
  bool collapse(std::uint32_t& id, std::uint64_t thread) {
    if (ops_.empty()) return true;
    bool& in_run = in_run_[thread];
    if (!has(id)) {
      in_run = false;
      return true;
    }
    if (in_run) return false;
    in_run = true;
    id = kInnerLoopRun;
    return true;
  }
  // Ops stored before are seen again from the start of no run, on `thread` or on every thread.
  void forgetRunOn(std::uint64_t thread) { in_run_[thread] = false; }
  void forgetRuns() { in_run_.clear(); }

 private:
  std::vector<std::uint32_t> ops_;
  std::unordered_map<std::uint64_t, bool> in_run_;  // per thread: its last op was one
};

}  // namespace memseal::inject
