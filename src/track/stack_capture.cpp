// Uses glibc's backtrace(), which unwinds with the DWARF unwind tables, because libtorch is not
// built with frame pointers.
#include "track/stack_capture.h"

#include <execinfo.h>

#include "track/hashing.h"

namespace memseal::track {

__attribute__((noinline)) void captureStack(CapturedStack& stack, int skip) {
  void* raw[kMaxStackFrames + 8];
  int drop = 1 + skip;  // this function, then the caller's own frames
  int total = backtrace(raw, kMaxStackFrames + drop);
  int depth = total > drop ? total - drop : 0;
  if (depth > kMaxStackFrames) depth = kMaxStackFrames;
  std::memcpy(stack.frames, raw + drop, sizeof(void*) * static_cast<std::size_t>(depth));
  stack.depth = depth;
}

void warmUpStackCapture() {
  CapturedStack stack;
  captureStack(stack, 0);
}

std::uint32_t internStack(StackTable& table, const CapturedStack& stack) {
  std::uint64_t hash = static_cast<std::uint64_t>(stack.depth);
  for (int i = 0; i < stack.depth; ++i) {
    hash = combineHash(hash, reinterpret_cast<std::uintptr_t>(stack.frames[i]));
  }
  return table.findOrInsert(hash, stack, [&](StackEntry& entry) {
    entry.depth = stack.depth;
    std::memcpy(entry.frames, stack.frames, sizeof(void*) * static_cast<std::size_t>(stack.depth));
  });
}

}  // namespace memseal::track
