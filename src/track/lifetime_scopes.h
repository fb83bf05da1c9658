// What lifetime scopes (scope/) need from the hot path: the innermost scope of each thread, which
// every allocation records, the thread's allocation counts, and moving a tensor's record between
// scopes (keep, detach).
#pragma once

#include <cstddef>
#include <cstdint>

namespace at {
class TensorBase;
}

namespace memseal::track {

// Makes `scope` the innermost scope of this thread; returns the one it replaces.
std::uint32_t enterLifetimeScope(std::uint32_t scope);
std::uint32_t currentLifetimeScope();

struct ThreadAllocationCounts {
  std::uint64_t tracked = 0;  // tracked allocations made on this thread, ever
  std::uint64_t tracked_bytes = 0;
  std::uint64_t system = 0;  // allocations that reached the system allocator on this thread, ever
};
ThreadAllocationCounts threadAllocationCounts();

// Moves the record of `tensor`'s storage from scope `from` to scope `to` (0: no scope); true and
// its bytes if it moved.
bool moveToLifetimeScope(const at::TensorBase& tensor, std::uint32_t from, std::uint32_t to,
                         std::size_t* bytes);

}  // namespace memseal::track
