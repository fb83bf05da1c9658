// Messages are composed only on a mismatch: a matching replay allocates nothing of its own.
#include "plan/replay.h"

#include "common/text.h"

namespace memseal::plan {

c10::DataPtr ReplayRegion::serve(std::size_t bytes) {
  std::uint32_t index = next_++;
  if (index >= plan_.sizes.size()) {
    mismatch("allocation #" + std::to_string(index) + " (" +
             common::bytesText(static_cast<std::int64_t>(bytes)) + ") is beyond the " +
             std::to_string(plan_.sizes.size()) + " allocations recorded");
    return {};
  }
  if (plan_.escapes[index]) {
    ++outputs_;
    return {};
  }
  if (bytes != plan_.sizes[index]) {
    mismatch("allocation #" + std::to_string(index) + " asked for " + std::to_string(bytes) +
             " bytes; the recording made " + std::to_string(plan_.sizes[index]) +
             " (another input shape under the same key?)");
    return {};
  }
  for (std::uint32_t earlier : plan_.must_be_freed[index]) {
    if (block_->live[earlier].load(std::memory_order_acquire)) {
      mismatch("allocation #" + std::to_string(index) + " would reuse the bytes of allocation #" +
               std::to_string(earlier) +
               ", which the recording freed before it but is still alive");
      return {};
    }
  }
  ++served_;
  return block_->serve(index);
}

void ReplayRegion::endRun() {
  if (run_ended_) return;
  run_ended_ = true;
  block_->endRun(served_ - freed_by_runner_);
}

void ReplayRegion::mismatch(std::string message) {
  ++fallbacks_;
  if (first_mismatch_.empty()) first_mismatch_ = std::move(message);
}

}  // namespace memseal::plan
