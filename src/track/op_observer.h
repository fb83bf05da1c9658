// The op observer: at::RecordFunction callbacks that keep each thread's stack of running ATen ops
// (which names the op behind an allocation) and, when an op returns, read the tensors it made.
#pragma once

#include <cstdint>

namespace memseal::track {

// With the session's control lock held. Whether op outputs are read for tensor metadata.
void configureOpObserver(bool record_tensor_metadata);
// Adds or removes the global RecordFunction callback. Ops already running keep their callbacks
// (RecordFunction copies them when an op starts), so every start still gets its end.
void setOpsWatched(bool watched);

// memseal's own RecordFunction callbacks: the tracker's (above) and `memseal run`'s loop finder's.
// libtorch's dispatcher runs an op through another path while callbacks are installed, and through
// another again when one of them reads the op's outputs, so a native stack taken inside an op
// depends on the callbacks there were when each op on it started: two stacks are comparable only
// under the same callbacks, and only when none came or went since the ops on them started.
inline constexpr std::uint64_t kTrackerCallback = 1;
inline constexpr std::uint64_t kLoopFinderCallback = 2;
inline constexpr std::uint64_t kCallbacksInstalled = kTrackerCallback | kLoopFinderCallback;
inline constexpr std::uint64_t kOneCallbackChange = 4;
// Which of the two are installed (the bits of kCallbacksInstalled) and how many times that changed
// (the bits above, in units of kOneCallbackChange), read in one load.
std::uint64_t recordFunctionCallbacks();
// Called by whoever adds or removes one of them, after doing so.
void noteRecordFunctionCallback(std::uint64_t which, bool installed);

}  // namespace memseal::track
