// The op observer: at::RecordFunction callbacks that keep each thread's stack of running ATen ops
// (which names the op behind an allocation) and, when an op returns, read the tensors it made.
#pragma once

namespace memseal::track {

// With the session's control lock held. Whether op outputs are read for tensor metadata.
void configureOpObserver(bool record_tensor_metadata);
// Adds or removes the global RecordFunction callback. Ops already running keep their callbacks
// (RecordFunction copies them when an op starts), so every start still gets its end.
void setOpsWatched(bool watched);

}  // namespace memseal::track
