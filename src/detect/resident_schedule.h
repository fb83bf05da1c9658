// When a step boundary reads the process's resident memory. The read is a system call (pread of
// /proc/self/statm): about 1 us on bare metal, 3 us in a virtual machine whose kernel entries pay
// for speculation mitigations, and beside a 200 us training step that is 1-2% of the step. So
// while a verdict is being formed (warm-up and the steps after it, a suspected leak) every boundary
// reads it; otherwise a boundary reads it when the time since the last read is at least
// kTimePerReadCost times what that read cost, and at least every kMaxStride boundaries. A loop of
// steps of 4 ms or longer is read on every boundary; a 200 us one on every eighth.
#pragma once

#include <cstdint>

namespace memseal::detect {

class ResidentSchedule {
 public:
  static constexpr std::int64_t kTimePerReadCost = 1024;
  static constexpr std::uint32_t kMaxStride = 8;

  // Whether the boundary ending `step`, at `now_ns` (steady clock), reads resident memory.
  bool due(std::uint32_t step, std::int64_t now_ns, bool every_boundary) const {
    if (every_boundary || !read_yet_) return true;
    if (step - last_step_ >= kMaxStride) return true;
    return now_ns - last_read_ns_ >= kTimePerReadCost * last_cost_ns_;
  }
  // A read at the boundary ending `step` that began at `start_ns` and ended at `end_ns`.
  void noteRead(std::uint32_t step, std::int64_t start_ns, std::int64_t end_ns) {
    read_yet_ = true;
    last_step_ = step;
    last_read_ns_ = end_ns;
    last_cost_ns_ = end_ns > start_ns ? end_ns - start_ns : 0;
  }

 private:
  bool read_yet_ = false;
  std::uint32_t last_step_ = 0;
  std::int64_t last_read_ns_ = 0;
  std::int64_t last_cost_ns_ = 0;
};

}  // namespace memseal::detect
