// The op-loop finder's names of ops as small numbers, and the backward pass's ops counted per
// thread. Pure: no lock (the finder's caller holds its own), no torch.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "inject/step_tuning.h"

namespace memseal::inject {

class OpCatalog {
 public:
  // The op's number. Looked up by the name's text without making a string: no allocation once a
  // name was seen. (Not by address: the names of backward functions and record_function regions
  // are made per call, and a freed name's address is soon another name's.)
  std::uint32_t id(const char* name) {
    auto known = ids_.find(std::string_view(name));
    if (known != ids_.end()) return known->second;
    // Bounded memory: names made per call (`ProfilerStep#N`, a region named after its batch) would
    // add one each; past kMaxOpNames, new names share one id (iterations with them do not match).
    if (names_.size() >= kMaxOpNames) return kOtherOps;
    names_.emplace_back(name);
    backward_.push_back(names_.back().rfind(kBackwardOpPrefix, 0) == 0);
    auto id = static_cast<std::uint32_t>(names_.size() - 1);
    ids_.emplace(std::string_view(names_.back()), id);
    return id;
  }
  const std::string& name(std::uint32_t id) const { return names_[id]; }
  // Whether op `id` is one of the backward pass's (the autograd engine's).
  bool isBackward(std::uint32_t id) const { return id < backward_.size() && backward_[id]; }

  // Counts the backward pass's ops per thread: a loop is judged by the backward run on its own
  // thread (where a CUDA program's backward runs on the engine's device threads, its loops never
  // are).
  void noteOp(std::uint32_t id, std::uint64_t thread) {
    if (isBackward(id)) ++backward_by_thread_[thread];
  }
  std::uint64_t backwardOn(std::uint64_t thread) const {
    auto found = backward_by_thread_.find(thread);
    return found == backward_by_thread_.end() ? 0 : found->second;
  }

 private:
  std::deque<std::string> names_;  // a deque: its strings never move (ids_ views them)
  std::vector<bool> backward_;     // by op id: one of the backward pass's
  std::unordered_map<std::string_view, std::uint32_t> ids_;
  std::unordered_map<std::uint64_t, std::uint64_t> backward_by_thread_;  // backward ops seen
};

}  // namespace memseal::inject
