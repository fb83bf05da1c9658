// What tensor pools (pool/) tell the tracker, so that leak analysis sees leases rather than
// buffers: a pool's buffers are marked and never blamed, and each lease taken while tracking is a
// record of its own (site: the pool class and the code that acquired it; step; lifetime scope) in a
// table beside the live allocations, from acquire until release.
#pragma once

#include <cstddef>
#include <cstdint>

#include "track/live_table.h"

namespace at {
class TensorBase;
}

namespace memseal::track {

// Leak reports recognise lease sites by this prefix of their op name.
constexpr const char* kPoolLeaseOpPrefix = "memseal::TensorPool lease";

// Marks a pool buffer's record (if the tracker knows it): leak analysis and scopes skip it.
void markPoolBuffer(const at::TensorBase& buffer);
// The op name a bucket's leases are attributed to, interned once per bucket:
// "memseal::TensorPool lease 'input' [4, 128]".
std::uint32_t poolLeaseName(const char* label);
// A lease of `lease`'s storage starts: true if recorded (a session is active). endLease ends a
// recorded one.
bool beginLease(const at::TensorBase& lease, std::uint32_t lease_name);
void endLease(const void* buffer_data);

// Leases taken while tracking and not yet released, keyed by buffer data pointer.
LiveTable& poolLeases();

}  // namespace memseal::track
