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
  std::uint32_t python_stack = 0;  // the Python frames above them (track/python_frames.h), 0: none
};

struct StackEntry {
  int depth = 0;
  std::uint32_t python_stack = 0;
  std::uintptr_t frames[kMaxStackFrames];
  bool matches(const CapturedStack& stack) const {
    if (depth != stack.depth || python_stack != stack.python_stack) return false;
    return std::memcmp(frames, stack.frames, sizeof(void*) * static_cast<std::size_t>(depth)) == 0;
  }
};

// 8192 distinct stacks of 64 frames: about 4 MiB, allocated only when stacks are turned on.
using StackTable = InsertOnlyTable<StackEntry, 8192>;

// Which unwinder captureStack uses. libunwind's unw_backtrace caches each code address's unwind
// rule per thread, so a stack it has seen before costs a fraction of glibc's backtrace(), which
// interprets the DWARF tables again on every call. It is loaded at run time when the process can
// find libunwind.so.8 (Debian's libunwind8), so building needs nothing more; otherwise glibc.
enum class Unwinder { kLibunwind, kGlibc };

// Fills `stack`, leaving out this function and `skip` more frames of memseal's own; in a Python
// process also the calling thread's Python stack.
void captureStack(CapturedStack& stack, int skip);
// Stacks captureStack unwound on the calling thread, ever: what the watched steps' stacks cost.
std::uint64_t stacksUnwoundOnThisThread();
// Loads the unwinder and makes the first capture, which may allocate: call it outside the hot path.
void warmUpStackCapture();
// The unwinder in use. Choosing kLibunwind where it cannot be loaded keeps glibc's (returned).
// MEMSEAL_UNWINDER=glibc in the environment picks glibc's from the start.
Unwinder currentUnwinder();
Unwinder selectUnwinder(Unwinder wanted);
const char* unwinderName(Unwinder unwinder);
// The same number for the same frames (and Python stack): the table's key.
std::uint64_t stackHash(const CapturedStack& stack);
// Returns the stack's id, 0 when the table is full.
std::uint32_t internStack(StackTable& table, const CapturedStack& stack);

}  // namespace memseal::track
