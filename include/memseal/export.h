// Symbol visibility for libmemseal: everything is hidden unless marked MEMSEAL_API.
#pragma once

#if defined(MEMSEAL_BUILDING_LIBRARY)
#define MEMSEAL_API __attribute__((visibility("default")))
#else
#define MEMSEAL_API
#endif
