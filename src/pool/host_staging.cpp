// Events are c10's device-generic ones, so this file needs no CUDA headers: with libtorch's CUDA
// library loaded they are CUDA events, and the CPU path never makes one.
#include "memseal/staging.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/core/Event.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/text.h"
#include "pool/bucket_grid.h"

namespace memseal {

namespace {

void sayHostFallbackOnce() {
  static std::once_flag said;
  std::call_once(said, [] {
    std::cerr << "memseal: CUDA is not available: HostStaging uses ordinary host memory and "
                 "synchronous copies\n";
  });
}

std::string shapeOf(const at::Tensor& tensor) {
  return common::shapeText(tensor.sizes().data(), tensor.sizes().size());
}

}  // namespace

struct HostStaging::State {
  struct Slot {
    at::Tensor buffer;                 // bytes, page-locked when CUDA is present
    std::optional<c10::Event> copied;  // recorded behind the last device copy that read it
  };
  std::vector<Slot> slots;
  std::size_t next = 0;
  std::size_t slot_bytes = 0;
  bool pinned = false;
  HostStagingStats stats;
};

HostStaging::HostStaging(std::size_t slot_bytes, std::size_t slots)
    : state_(std::make_unique<State>()) {
  if (slot_bytes == 0 || slots == 0) {
    throw std::invalid_argument("memseal: HostStaging needs slot_bytes and slots above 0 (got " +
                                std::to_string(slot_bytes) + " and " + std::to_string(slots) + ")");
  }
  State& state = *state_;
  state.slot_bytes = slot_bytes;
  state.pinned = at::globalContext().hasCUDA();
  if (!state.pinned) sayHostFallbackOnce();
  c10::InferenceMode normal_tensors(/*enabled=*/false);
  at::TensorOptions options = at::TensorOptions().dtype(at::kByte).pinned_memory(state.pinned);
  state.slots.resize(slots);
  for (State::Slot& slot : state.slots) {
    slot.buffer = at::empty({static_cast<std::int64_t>(slot_bytes)}, options);
  }
}

HostStaging::~HostStaging() {
  try {
    synchronize();
  } catch (const std::exception& error) {
    std::cerr << "memseal: HostStaging could not wait for its copies: " << error.what() << "\n";
  }
}

void HostStaging::upload(const at::Tensor& source, const at::Tensor& destination,
                         std::optional<c10::Stream> stream) {
  State& state = *state_;
  if (!source.defined() || !destination.defined()) {
    throw std::invalid_argument("memseal: HostStaging::upload needs defined tensors");
  }
  if (!source.device().is_cpu()) {
    throw std::invalid_argument("memseal: HostStaging::upload's source is on " +
                                source.device().str() + "; it uploads host data");
  }
  if (source.numel() != destination.numel()) {
    throw std::invalid_argument("memseal: HostStaging::upload: source " + shapeOf(source) +
                                " and destination " + shapeOf(destination) + " differ in size");
  }
  if (!destination.is_contiguous()) {
    throw std::invalid_argument("memseal: HostStaging::upload's destination " +
                                shapeOf(destination) + " is not contiguous");
  }
  std::size_t bytes = destination.nbytes();
  if (bytes > state.slot_bytes) {
    throw std::invalid_argument("memseal: HostStaging::upload of " + std::to_string(bytes) +
                                " bytes does not fit a staging buffer of " +
                                std::to_string(state.slot_bytes) + " bytes");
  }
  if (stream && stream->device() != destination.device()) {
    throw std::invalid_argument("memseal: HostStaging::upload's stream is on " +
                                stream->device().str() + ", the destination on " +
                                destination.device().str());
  }
  State::Slot& slot = state.slots[state.next];
  state.next = (state.next + 1) % state.slots.size();
  // The copy that last read this buffer must be done before it is written again.
  if (slot.copied && !slot.copied->query()) {
    ++state.stats.waited_for_copy;
    slot.copied->synchronize();
  }
  // The staging buffer seen as the destination's dtype and shape (no allocation: a TensorImpl on
  // its storage), filled on the host, converting dtype and layout if needed.
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(slot.buffer.storage()),
                                                   slot.buffer.key_set(), destination.dtype());
  impl->set_sizes_contiguous(destination.sizes());
  at::Tensor staged(std::move(impl));
  staged.copy_(source);
  bool asynchronous = state.pinned && !destination.device().is_cpu();
  if (!asynchronous) {
    destination.copy_(staged);
  } else {
    c10::impl::VirtualGuardImpl device_guard(destination.device().type());
    c10::Stream on = stream ? *stream : device_guard.getStream(destination.device());
    c10::StreamGuard use(on);
    destination.copy_(staged, /*non_blocking=*/true);
    // An event records on streams of one device: a slot that last served another device gets a
    // new one (its old copy was waited for above).
    if (!slot.copied || slot.copied->device() != destination.device()) {
      slot.copied.emplace(destination.device().type());
    }
    slot.copied->record(on);
  }
  ++state.stats.uploads;
  state.stats.bytes += static_cast<std::int64_t>(bytes);
}

void HostStaging::synchronize() {
  for (State::Slot& slot : state_->slots) {
    if (slot.copied) slot.copied->synchronize();
  }
}

bool HostStaging::pinned() const { return state_->pinned; }

HostStagingStats HostStaging::stats() const { return state_->stats; }

}  // namespace memseal
