// Tells AddressSanitizer which bytes of an arena block are live, so that the arena does not hide
// use-after-free or overflow bugs from it (as mimalloc's track.h does). No-ops without ASan.
#pragma once

#if defined(MEMSEAL_ASAN)
#include <sanitizer/asan_interface.h>
#define MEMSEAL_POISON(address, size) ASAN_POISON_MEMORY_REGION(address, size)
#define MEMSEAL_UNPOISON(address, size) ASAN_UNPOISON_MEMORY_REGION(address, size)
#else
#define MEMSEAL_POISON(address, size) ((void)(address), (void)(size))
#define MEMSEAL_UNPOISON(address, size) ((void)(address), (void)(size))
#endif
