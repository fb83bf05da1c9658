// Native call stacks as return addresses: captured into a fixed buffer on the hot path, stored once
// per distinct stack, symbolized only when a report is made (analyze/symbolize).
#pragma once

#include <cstdint>
#include <cstring>

#include "track/insert_only_table.h"

namespace memseal::track {

constexpr int kMaxStackFrames = 64;

struct CapturedStack {
  void* frames[kMaxStackFrames];
  int depth = 0;
};

struct StackEntry {
  int depth = 0;
  std::uintptr_t frames[kMaxStackFrames];
  bool matches(const CapturedStack& stack) const {
    if (depth != stack.depth) return false;
    return std::memcmp(frames, stack.frames, sizeof(void*) * static_cast<std::size_t>(depth)) == 0;
  }
};

// 8192 distinct stacks of 64 frames: about 4 MiB, allocated only when stacks are turned on.
using StackTable = InsertOnlyTable<StackEntry, 8192>;

// Fills `stack`, leaving out this function and `skip` more frames of memseal's own.
void captureStack(CapturedStack& stack, int skip);
// Makes the first capture, which may load the unwinder (and allocate) in glibc.
void warmUpStackCapture();
// Returns the stack's id, 0 when the table is full.
std::uint32_t internStack(StackTable& table, const CapturedStack& stack);

}  // namespace memseal::track
