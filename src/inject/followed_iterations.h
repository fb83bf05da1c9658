// The iterations of the loop the op-loop finder follows, on its thread: the ops since its anchor's
// last call, whether each of the last kJudgedIterations iterations matched the usual one, and the
// runs of matched iterations that a longer iteration broke. Pure: no lock, no torch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "analyze/repeating_ops.h"
#include "inject/step_tuning.h"

namespace memseal::inject {

class FollowedIterations {
 public:
  // A loop is entered: nothing of the one before counts.
  void reset() {
    judgeAfresh();
    hash_ = analyze::kEmptyOpsHash;
    length_ = 0;
    matched_run_ = 0;
    interrupted_runs_.clear();
  }
  // Judged afresh from the anchor's next call (the ops were not followed for a while).
  void judgeAfresh() {
    started_ = false;
    recent_matches_ = 0;
    recent_judged_ = 0;
    mismatching_ = false;
    ops_since_anchor_ = 0;
  }
  // The anchor moved: the iteration under way is no longer one.
  void restartIteration() { started_ = false; }

  // Every op of the loop's thread, the anchor's calls included, before it is judged.
  void countOp() { ++ops_since_anchor_; }
  std::size_t opsSinceAnchor() const { return ops_since_anchor_; }

  // At a call of the anchor: whether the iteration it ends (none before the first call) matched
  // the usual one, `period` ops folded to `signature`. `steps_taken` marks where a run of
  // iterations that did not match began (stepsBack).
  std::optional<bool> judgeEndedIteration(std::size_t period, std::uint64_t signature,
                                          std::uint64_t steps_taken) {
    if (!started_) return std::nullopt;
    bool matched = length_ == period && hash_ == signature;
    if (!matched && !mismatching_) steps_at_mismatch_ = steps_taken;
    mismatching_ = !matched;
    if (matched) ++matched_run_;
    return matched;
  }
  // The ended iteration's length in ops, and the backward ops counted on its thread as it began.
  std::size_t endedLength() const { return length_; }
  std::uint64_t backwardAtItsStart() const { return backward_at_start_; }
  // The ended iteration stays in the loop: one of the last judged.
  void keepJudged(bool matched) {
    recent_matches_ =
        ((recent_matches_ << 1) | (matched ? 1u : 0u)) & ((1u << kJudgedIterations) - 1);
    recent_judged_ = std::min(recent_judged_ + 1, kJudgedIterations);
  }
  // A new iteration begins at the anchor's call; `backward_now`: backward ops on its thread so far.
  void startIteration(std::uint32_t anchor, std::uint64_t backward_now) {
    started_ = true;
    hash_ = analyze::foldOp(analyze::kEmptyOpsHash, anchor);
    length_ = 1;
    backward_at_start_ = backward_now;
    ops_since_anchor_ = 0;
  }
  // Another op of the iteration under way.
  void addOp(std::uint32_t id) {
    if (!started_) return;
    hash_ = analyze::foldOp(hash_, id);
    ++length_;
  }

  int recentMatches() const { return __builtin_popcount(recent_matches_); }
  std::uint32_t recentJudged() const { return recent_judged_; }
  // Fewer than half of the last kJudgedIterations matched: the loop has ended.
  bool mostlyUnlike() const {
    return recent_judged_ >= kJudgedIterations &&
           2 * recentMatches() < static_cast<int>(kJudgedIterations);
  }
  // All of the last kJudgedIterations matched.
  bool allRecentMatched() const {
    constexpr std::uint32_t all = (1u << kJudgedIterations) - 1;
    return recent_judged_ >= kJudgedIterations && recent_matches_ == all;
  }
  // The steps taken since the iterations that no longer match began (0 while they match).
  std::uint64_t stepsBack(std::uint64_t steps_taken) const {
    return mismatching_ ? steps_taken - steps_at_mismatch_ : 0;
  }

  // The ended iteration did not match, after the run of matched ones before it: whether the loop,
  // so interrupted again and again, lies inside a longer iteration. The iteration that broke the
  // run adds a quarter of an iteration's ops or more (the rest of the longer iteration; a log line
  // adds less) to a short run, as findLoop tells a layer inside the iteration from it. Runs all of
  // one length are left to findLoop's own rule: they are what a log line every N iterations gives.
  bool interruptedAgainAndAgain(std::size_t period) {
    bool interrupted =
        matched_run_ > 0 && matched_run_ < kInnerLoopIterations && 4 * length_ >= 5 * period;
    if (interrupted) {
      interrupted_runs_.push_back(matched_run_);
    } else {
      interrupted_runs_.clear();
    }
    matched_run_ = 0;
    if (interrupted_runs_.size() < static_cast<std::size_t>(kInnerLoopRuns)) return false;
    bool varying = std::any_of(interrupted_runs_.begin(), interrupted_runs_.end(),
                               [&](std::uint32_t run) { return run != interrupted_runs_.front(); });
    interrupted_runs_.erase(interrupted_runs_.begin());
    return varying;
  }

 private:
  bool started_ = false;
  std::uint64_t hash_ = analyze::kEmptyOpsHash;  // the ops since the anchor's last call
  std::size_t length_ = 0;
  std::uint64_t backward_at_start_ = 0;
  std::size_t ops_since_anchor_ = 0;
  // Whether each of the last iterations matched (bits, newest lowest), and how many were judged.
  std::uint32_t recent_matches_ = 0;
  std::uint32_t recent_judged_ = 0;
  // Steps taken when the current run of iterations that did not match began.
  std::uint64_t steps_at_mismatch_ = 0;
  bool mismatching_ = false;
  // Matched iterations since the last that did not, and the lengths of the last runs of them that
  // such an iteration broke, newest last.
  std::uint32_t matched_run_ = 0;
  std::vector<std::uint32_t> interrupted_runs_;
};

}  // namespace memseal::inject
