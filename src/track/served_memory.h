// The registry of memory planned arenas serve (see arena_region.h): frees of served pointers from
// other threads, or after their region ended, find their owner here.
#pragma once

namespace memseal::track {

// True if a registered owner served `data` (and freed it).
bool releaseServedAnywhere(void* data);

}  // namespace memseal::track
