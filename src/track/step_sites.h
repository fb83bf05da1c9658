// The sites a thread's stack captures got on its last watched step, by their place in that step.
// Where ops are watched on some steps only, the steps in between are attributed on the premise that
// a loop's k-th allocation of a step is made where the k-th of its watched step was. Watched steps
// rest on the same premise for their stacks: a capture whose op, outer op, scope and size match the
// capture at its place in the thread's last step with captures takes that capture's site (its stack
// included) instead of unwinding again. Unwinding is most of a watched step's cost (about 1 us a
// stack while the unwinder's caches are cold, 140 stacks a step of a small training loop); the op
// names, which watching reads anyway, tell where the premise fails, and there the stack is
// captured.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace memseal::track {

class StepSites {
 public:
  // Captures beyond this many in one step are always unwound.
  static constexpr std::uint32_t kMaxPlaces = 1u << 14;
  static constexpr std::uint32_t kNoPlace = UINT32_MAX;

  // What a capture is made for; `site` is what it got.
  struct Capture {
    std::uint32_t inner_op = 0;
    std::uint32_t outer_op = 0;
    std::uint32_t scope_path = 0;
    std::uint32_t site = 0;
    std::uint64_t bytes = 0;  // the allocation's size, 0 for an op's output
    bool sameAs(const Capture& other) const {
      return inner_op == other.inner_op && outer_op == other.outer_op &&
             scope_path == other.scope_path && bytes == other.bytes;
    }
  };

  constexpr StepSites() = default;
  ~StepSites() {
    std::free(places_);
    places_ = nullptr;
    known_ = capacity_ = 0;
    closed_ = true;  // the thread is exiting: nothing is remembered after this
  }
  StepSites(const StepSites&) = delete;
  StepSites& operator=(const StepSites&) = delete;

  // The place of the thread's next capture in `step` of `session`; the first capture of another
  // step is at place 0. kNoPlace beyond kMaxPlaces.
  std::uint32_t nextPlace(std::uint32_t step, std::uint32_t session) {
    if (step != step_ || session != session_) {
      if (session != session_) known_ = 0;  // another session's sites and options
      step_ = step;
      session_ = session;
      next_ = 0;
    }
    return next_ < kMaxPlaces ? next_++ : kNoPlace;
  }
  // The site of the last capture made at `place` when it was made for what `wanted` is, else 0.
  std::uint32_t siteFor(std::uint32_t place, const Capture& wanted) const {
    if (place >= known_) return 0;
    const Capture& last = places_[place];
    return last.sameAs(wanted) ? last.site : 0;
  }
  // Keeps `captured` as the last capture at `place` (nothing when memory cannot be had).
  void remember(std::uint32_t place, const Capture& captured) {
    if (closed_ || place == kNoPlace) return;
    if (place >= capacity_ && !grow(place + 1)) return;
    // Places before `known_` keep what was captured there last, in this step or an earlier one:
    // still a capture made at that place. Places between it and this one (captures not kept) are
    // marked empty.
    for (std::uint32_t filled = known_; filled < place; ++filled) places_[filled] = Capture{};
    places_[place] = captured;
    if (place >= known_) known_ = place + 1;
  }

 private:
  bool grow(std::uint32_t needed) {
    std::uint32_t grown = capacity_ == 0 ? 256 : capacity_;
    while (grown < needed) grown *= 2;
    // realloc, never the allocator being tracked.
    void* moved = std::realloc(places_, sizeof(Capture) * grown);
    if (moved == nullptr) return false;
    places_ = static_cast<Capture*>(moved);
    capacity_ = grown;
    return true;
  }

  Capture* places_ = nullptr;
  std::uint32_t capacity_ = 0;
  std::uint32_t known_ = 0;  // places [0, known_) hold a capture (or an empty one)
  std::uint32_t step_ = UINT32_MAX;
  std::uint32_t session_ = 0;
  std::uint32_t next_ = 0;
  bool closed_ = false;
};

}  // namespace memseal::track
