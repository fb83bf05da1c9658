// libtorch is not built with frame pointers, so stacks are unwound with the DWARF unwind tables:
// by libunwind's unw_backtrace when it can be loaded (fast: it caches the unwind rule of each code
// address), by glibc's backtrace() otherwise.
#include "track/stack_capture.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "track/hashing.h"
#include "track/python_frames.h"

namespace memseal::track {

namespace {

using BacktraceFn = int (*)(void**, int);

// glibc's backtrace() takes an int size; the same shape lets both unwinders share one call site.
int glibcBacktrace(void** frames, int size) { return backtrace(frames, size); }

std::atomic<BacktraceFn> g_backtrace{&glibcBacktrace};

// Loaded once, RTLD_LOCAL: libunwind.so.8 also defines _Unwind_* and backtrace, which must not
// replace libgcc's (C++ exceptions) or glibc's for the rest of the process. Never unloaded.
BacktraceFn loadLibunwind() {
  static BacktraceFn loaded = []() -> BacktraceFn {
#if defined(MEMSEAL_TSAN)
    // ThreadSanitizer crashes in the mutex that libunwind's per-thread cache destructor takes
    // after TSan has torn down the exiting thread's state: under TSan, glibc's unwinder only.
    return nullptr;
#endif
    void* library = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return nullptr;
    auto unw_backtrace = reinterpret_cast<BacktraceFn>(dlsym(library, "unw_backtrace"));
    // Per-thread caches: the default global cache takes a lock on every frame.
    using SetCachingPolicyFn = int (*)(void*, int);
    auto set_caching_policy =
        reinterpret_cast<SetCachingPolicyFn>(dlsym(library, "_ULx86_64_set_caching_policy"));
    auto* local_address_space = static_cast<void**>(dlsym(library, "_ULx86_64_local_addr_space"));
    constexpr int kCachePerThread = 2;  // UNW_CACHE_PER_THREAD in <libunwind.h>
    if (set_caching_policy != nullptr && local_address_space != nullptr) {
      set_caching_policy(*local_address_space, kCachePerThread);
    }
    return unw_backtrace;
  }();
  return loaded;
}

std::once_flag g_default_chosen;
thread_local std::uint64_t t_stacks_unwound = 0;

void chooseDefaultUnwinder() {
  std::call_once(g_default_chosen, [] {
    const char* requested = std::getenv("MEMSEAL_UNWINDER");
    if (requested != nullptr && std::strcmp(requested, "glibc") == 0) return;
    if (BacktraceFn unwind = loadLibunwind()) g_backtrace.store(unwind, std::memory_order_release);
  });
}

}  // namespace

__attribute__((noinline)) void captureStack(CapturedStack& stack, int skip) {
  void* raw[kMaxStackFrames + 8];
  int drop = 1 + skip;  // this function, then the caller's own frames
  BacktraceFn unwind = g_backtrace.load(std::memory_order_acquire);
  int total = unwind(raw, kMaxStackFrames + drop);
  ++t_stacks_unwound;
  int depth = total > drop ? total - drop : 0;
  if (depth > kMaxStackFrames) depth = kMaxStackFrames;
  std::memcpy(stack.frames, raw + drop, sizeof(void*) * static_cast<std::size_t>(depth));
  stack.depth = depth;
  stack.python_stack = capturePythonStack();
}

std::uint64_t stacksUnwoundOnThisThread() { return t_stacks_unwound; }

void warmUpStackCapture() {
  chooseDefaultUnwinder();
  CapturedStack stack;
  captureStack(stack, 0);
}

Unwinder currentUnwinder() {
  chooseDefaultUnwinder();
  return g_backtrace.load(std::memory_order_acquire) == &glibcBacktrace ? Unwinder::kGlibc
                                                                        : Unwinder::kLibunwind;
}

Unwinder selectUnwinder(Unwinder wanted) {
  chooseDefaultUnwinder();
  BacktraceFn unwind = &glibcBacktrace;
  if (wanted == Unwinder::kLibunwind) {
    if (BacktraceFn loaded = loadLibunwind()) unwind = loaded;
  }
  g_backtrace.store(unwind, std::memory_order_release);
  warmUpStackCapture();
  return currentUnwinder();
}

const char* unwinderName(Unwinder unwinder) {
  return unwinder == Unwinder::kLibunwind ? "libunwind" : "glibc backtrace";
}

std::uint64_t stackHash(const CapturedStack& stack) {
  std::uint64_t hash = combineHash(static_cast<std::uint64_t>(stack.depth), stack.python_stack);
  for (int i = 0; i < stack.depth; ++i) {
    hash = combineHash(hash, reinterpret_cast<std::uintptr_t>(stack.frames[i]));
  }
  return hash;
}

std::uint32_t internStack(StackTable& table, const CapturedStack& stack) {
  return table.findOrInsert(stackHash(stack), stack, [&](StackEntry& entry) {
    entry.depth = stack.depth;
    entry.python_stack = stack.python_stack;
    std::memcpy(entry.frames, stack.frames, sizeof(void*) * static_cast<std::size_t>(stack.depth));
  });
}

}  // namespace memseal::track
