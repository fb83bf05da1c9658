// Replaying a plan: the i-th allocation of the run is served from the block at the plan's offset
// when it asks for the recorded size and every earlier allocation sharing its bytes has been
// freed; otherwise it falls back to the system allocator and the mismatch is said.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "plan/block.h"
#include "track/arena_region.h"

namespace memseal::plan {

class ReplayRegion final : public track::ArenaRegion {
 public:
  explicit ReplayRegion(Block* block) : block_(block), plan_(*block->plan) { block_->beginRun(); }
  ~ReplayRegion() override { endRun(); }
  ReplayRegion(const ReplayRegion&) = delete;
  ReplayRegion& operator=(const ReplayRegion&) = delete;

  c10::DataPtr serve(std::size_t bytes) override;
  c10::DataPtr observe(c10::DataPtr allocation, std::size_t) override { return allocation; }
  bool releaseOnThisThread(void* data) override {
    return block_->releaseByRunner(data, freed_by_runner_);
  }

  // After the region (also when it threw): the block's count is exact again, so liveTensors() can
  // decide its fate. Later frees on this thread take the path of any other thread.
  void endRun();

  std::uint32_t allocationsMade() const { return next_; }
  std::int64_t served() const { return served_; }
  std::int64_t fallbacks() const { return fallbacks_; }
  std::int64_t outputs() const { return outputs_; }
  const std::string& firstMismatch() const { return first_mismatch_; }
  // Counts a fallback and keeps the first message.
  void mismatch(std::string message);

 private:
  Block* block_;
  const ArenaPlan& plan_;
  std::uint32_t next_ = 0;
  bool run_ended_ = false;
  std::int64_t served_ = 0;
  std::int64_t freed_by_runner_ = 0;
  std::int64_t fallbacks_ = 0;
  std::int64_t outputs_ = 0;
  std::string first_mismatch_;
};

}  // namespace memseal::plan
