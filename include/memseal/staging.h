// Host-to-device uploads through page-locked staging buffers, double-buffered: a request's input is
// written into the next staging buffer and copied to the device without blocking, so the next
// request's copy overlaps the current one's compute. A staging buffer is written again only after
// the copy that read it has finished (an event recorded behind the copy on its stream).
//
//   memseal::HostStaging staging(/*slot_bytes=*/32 * 512 * sizeof(float));
//   staging.upload(request_tensor, device_input, stream);   // returns once the copy is queued
//
// Where CUDA is absent (or the destination is on the CPU) the same calls work on ordinary host
// memory with synchronous copies; the first HostStaging made says so once on stderr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include "memseal/export.h"

namespace memseal {

struct HostStagingStats {
  std::int64_t uploads = 0;
  std::int64_t bytes = 0;
  // Uploads that found their staging buffer's previous copy still in flight and waited for it:
  // many means more slots are needed (or the device falls behind).
  std::int64_t waited_for_copy = 0;
};

// One per worker (or stream): not thread-safe.
class MEMSEAL_API HostStaging {
 public:
  // `slot_bytes`: the most one upload carries; `slots`: staging buffers in rotation (2: double
  // buffering). std::invalid_argument for 0 of either.
  explicit HostStaging(std::size_t slot_bytes, std::size_t slots = 2);
  // Waits for copies still in flight, which read these buffers.
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Copies `source` (host memory, any layout and dtype) into `destination` (contiguous, the same
  // number of elements, on any device) through the next staging buffer. The device copy is queued
  // on `stream` (default: the destination device's current stream) and not waited for: use
  // `destination` on that stream, or synchronize before reading it elsewhere. std::invalid_argument
  // when the sizes differ, `destination` is not contiguous, `source` is not on the CPU, or the
  // data does not fit a staging buffer.
  void upload(const at::Tensor& source, const at::Tensor& destination,
              std::optional<c10::Stream> stream = std::nullopt);
  // Waits until every queued copy has finished.
  void synchronize();

  bool pinned() const;  // page-locked buffers (CUDA present)
  HostStagingStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace memseal
