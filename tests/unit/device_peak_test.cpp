// explain's CUDA peak on synthetic steps of one device: the moment allocated bytes are highest,
// what was reserved and waiting for streams then, and each block's role told by identity (an
// address named before the step, after it, or seen by backward), never by size.
#include "explain/device_peak.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace memseal {
namespace {

using explain::DeviceAddressRoles;
using explain::DeviceStepEvents;
using track::DeviceEventKind;
using track::DeviceMemoryEvent;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kBase = 0x7f0000000000;

DeviceMemoryEvent event(DeviceEventKind kind, std::uint64_t offset, std::uint64_t bytes,
                        std::uint32_t site = 0) {
  DeviceMemoryEvent made;
  made.kind = kind;
  made.address = kBase + offset;
  made.bytes = bytes;
  made.site = site;
  return made;
}

void allocate(DeviceStepEvents& step, std::uint64_t offset, std::uint64_t bytes,
              std::uint32_t site = 0) {
  step.events.push_back(event(DeviceEventKind::kBlockAlloc, offset, bytes, site));
}

void free(DeviceStepEvents& step, std::uint64_t offset, std::uint64_t bytes) {
  step.events.push_back(event(DeviceEventKind::kBlockFreeRequested, offset, bytes));
  step.events.push_back(event(DeviceEventKind::kBlockFreeCompleted, offset, bytes));
}

track::LiveBlockSummary liveBlock(std::uint64_t offset, std::uint64_t bytes) {
  track::LiveBlockSummary block;
  block.address = kBase + offset;
  block.bytes = bytes;
  return block;
}

std::int64_t bytesOf(const DevicePeak& peak, MemoryRole role) {
  return peak.roles[static_cast<std::size_t>(role)].bytes;
}

std::int64_t mib(std::uint64_t count) { return static_cast<std::int64_t>(count * kMiB); }

// A training step's shapes: parameters live before, optimizer state made lazily and kept, a
// gradient backward accumulated into, an activation autograd saved, a temporary, and an address
// named before the step that the step freed and handed to a new block.
TEST(DevicePeak, RolesComeFromIdentityAndTheAddressThatHeldItThen) {
  DeviceStepEvents step;
  step.reserved_at_start = 64 * kMiB;
  step.blocks_at_start = {liveBlock(0, 8 * kMiB), liveBlock(8 * kMiB, 2 * kMiB)};
  DeviceAddressRoles roles;
  roles.before[kBase] = {MemoryRole::kParameters, "Net/encoder"};
  roles.before[kBase + 8 * kMiB] = {MemoryRole::kGradients,
                                    "Net/encoder"};  // last step's .grad, dropped below
  free(step, 8 * kMiB, 2 * kMiB);
  allocate(step, 8 * kMiB, 2 * kMiB);   // a new block at the dropped gradient's address
  allocate(step, 16 * kMiB, 4 * kMiB);  // saved for backward
  roles.saved.insert(kBase + 16 * kMiB);
  allocate(step, 20 * kMiB, 1 * kMiB);  // a temporary
  allocate(step, 24 * kMiB, 8 * kMiB);  // the gradient
  roles.gradients.insert(kBase + 24 * kMiB);
  allocate(step, 32 * kMiB, 16 * kMiB);  // optimizer state, named after the step
  roles.after[kBase + 32 * kMiB] = {MemoryRole::kOptimizerState, "Net/decoder"};
  free(step, 20 * kMiB, 1 * kMiB);
  free(step, 16 * kMiB, 4 * kMiB);
  free(step, 8 * kMiB, 2 * kMiB);

  DevicePeak peak = explain::deviceStepPeak(step, roles, nullptr);
  EXPECT_EQ(peak.allocated_bytes, mib(8 + 2 + 4 + 1 + 8 + 16));
  EXPECT_EQ(peak.baseline_allocated_bytes, mib(10));
  EXPECT_EQ(peak.end_allocated_bytes, mib(8 + 8 + 16));
  EXPECT_EQ(peak.reserved_bytes, mib(64));
  EXPECT_EQ(peak.blocks, 6);
  EXPECT_EQ(bytesOf(peak, MemoryRole::kParameters), mib(8));
  EXPECT_EQ(bytesOf(peak, MemoryRole::kGradients), mib(8));
  EXPECT_EQ(bytesOf(peak, MemoryRole::kOptimizerState), mib(16));
  EXPECT_EQ(bytesOf(peak, MemoryRole::kActivations), mib(4));
  // The temporary, and the block that reused the dropped gradient's address: made and freed in
  // the step, whatever the address was named before.
  EXPECT_EQ(bytesOf(peak, MemoryRole::kTemporaries), mib(1 + 2));
  EXPECT_EQ(bytesOf(peak, MemoryRole::kOther), 0);
  // Named tensors under the modules the caller gave; the rest where their site's scope says.
  auto moduleBytes = [&](const std::string& name) {
    for (const ModuleBytes& module : peak.modules) {
      if (module.module == name) return module.bytes;
    }
    return std::int64_t{-1};
  };
  EXPECT_EQ(moduleBytes("Net/encoder"), mib(8));
  EXPECT_EQ(moduleBytes("Net/decoder"), mib(16));
  EXPECT_EQ(moduleBytes(""), mib(2 + 4 + 1 + 8));
  EXPECT_EQ(peak.modules.front().module, "Net/decoder");
}

TEST(DevicePeak, AStepThatOnlyFreesPeaksWhenItBegins) {
  DeviceStepEvents step;
  step.blocks_at_start = {liveBlock(0, 4 * kMiB), liveBlock(4 * kMiB, 4 * kMiB)};
  step.reserved_at_start = 20 * kMiB;
  free(step, 4 * kMiB, 4 * kMiB);
  step.events.push_back(event(DeviceEventKind::kSegmentFree, 12 * kMiB, 8 * kMiB));
  DevicePeak peak = explain::deviceStepPeak(step, {}, nullptr);
  EXPECT_EQ(peak.allocated_bytes, mib(8));
  EXPECT_EQ(peak.reserved_bytes, mib(20));
  EXPECT_EQ(peak.reserved_peak_bytes, mib(20));
  EXPECT_EQ(peak.end_allocated_bytes, mib(4));
  EXPECT_EQ(peak.cachedFreeBytes(), mib(12));
  EXPECT_EQ(bytesOf(peak, MemoryRole::kOther), mib(8));
}

// Blocks from before the ledger knew the device are tolerated: their frees match nothing.
TEST(DevicePeak, FreesOfUnknownBlocksChangeNothing) {
  DeviceStepEvents step;
  free(step, 40 * kMiB, 4 * kMiB);
  allocate(step, 0, 2 * kMiB);
  DevicePeak peak = explain::deviceStepPeak(step, {}, nullptr);
  EXPECT_EQ(peak.allocated_bytes, mib(2));
  EXPECT_EQ(peak.pending_free_bytes, 0);
  EXPECT_EQ(peak.end_allocated_bytes, mib(2));
}

// A block whose free was lost (events dropped) is replaced by the next allocation at its address.
TEST(DevicePeak, AnAllocationOverABlockWhoseFreeWasLostReplacesIt) {
  DeviceStepEvents step;
  step.blocks_at_start = {liveBlock(0, 4 * kMiB)};
  allocate(step, 0, 2 * kMiB);
  allocate(step, 8 * kMiB, 1 * kMiB);
  DevicePeak peak = explain::deviceStepPeak(step, {}, nullptr);
  EXPECT_EQ(peak.allocated_bytes, mib(4));  // when the step began
  EXPECT_EQ(peak.end_allocated_bytes, mib(3));
  EXPECT_EQ(peak.blocks, 1);
}

TEST(DevicePeak, SitesAreLargestFirstAndEachIsNamedOnce) {
  DeviceStepEvents step;
  for (std::uint32_t site = 1; site <= 40; ++site) allocate(step, site * kMiB, site * 1024, site);
  std::vector<std::uint32_t> named;
  DevicePeak peak = explain::deviceStepPeak(step, {}, [&](std::uint32_t site) {
    named.push_back(site);
    return std::make_pair("op" + std::to_string(site), std::string());
  });
  ASSERT_EQ(peak.sites.size(), 32u);
  std::sort(named.begin(), named.end());
  EXPECT_EQ(std::unique(named.begin(), named.end()), named.end());
  EXPECT_EQ(named.size(), 40u);
  EXPECT_EQ(peak.sites.front().op, "op40");
  EXPECT_EQ(peak.sites.front().bytes, 40 * 1024);
  EXPECT_EQ(peak.sites.back().op, "op9");
  for (std::size_t i = 1; i < peak.sites.size(); ++i) {
    EXPECT_GE(peak.sites[i - 1].bytes, peak.sites[i].bytes);
  }
}

}  // namespace
}  // namespace memseal
