// Branch hints for the hot path. The code of one allocation and its free runs between libtorch's
// own, which evicts it from the instruction cache every time: each cache line of it that runs is a
// miss. Marking the rare branches unlikely lets the compiler move them out of the lines that run
// (to the function's .cold part), so fewer lines are fetched per allocation; MEMSEAL_HOT puts the
// functions every allocation runs side by side (.text.hot) rather than wherever the link left them.
#pragma once

#define MEMSEAL_LIKELY(condition) __builtin_expect(static_cast<bool>(condition), 1)
#define MEMSEAL_UNLIKELY(condition) __builtin_expect(static_cast<bool>(condition), 0)
#define MEMSEAL_HOT __attribute__((hot))
