// Judges a CUDA device's step samples (leak, caching, fragmentation) and explains out-of-memory.
#include "detect/device_diagnosis.h"

#include <algorithm>
#include <cstdio>

#include "common/text.h"
#include "detect/growth_criterion.h"

namespace memseal::detect {

namespace {

using common::fixedText;
using common::minusOrZero;
using common::unsignedBytesText;

// Every block the caching allocator hands out is a multiple of 512 bytes: allocated memory that
// grows by less than one block per step is not an allocator-level leak.
constexpr double kMinLeakBytesPerStep = 512;
// The allocator's large segments are 20 MiB (kLargeBuffer). Reserved memory above the step's
// need by less than one such segment is allocation granularity, not a cache or a fragmented pool
// worth a verdict.
constexpr std::uint64_t kMinUnusedReservedBytes = 20ull << 20;
// Reserved above the step's peak by at least half that peak. Rounding (blocks to 512 B or 2 MiB,
// 1-10 MiB requests sharing 20 MiB segments) keeps a healthy loop well below it once its peak
// is larger than a few segments; smaller loops are covered by kMinUnusedReservedBytes.
constexpr double kMinUnusedShareOfPeak = 0.5;
// Any segment the allocator splits has a gap or two; fragmentation scatters free space over many.
constexpr std::uint64_t kMinInactiveSplitBlocks = 8;
// Fragmentation when most of the free reserved bytes sit in segments that also hold live blocks
// (empty_cache cannot return them); when most sit in wholly free segments it is caching.
constexpr double kMinSplitShareOfFree = 0.5;
// Fragmentation must hold on at least this share of the most recent quarter of the samples (and
// on the last one): one odd step boundary is not a fragmented pool.
constexpr double kMinFragmentedShareOfRecent = 0.5;
// Reserved growth after warm-up is caching only while the step's peak grew by less than half as
// much: reserved rising with allocated and levelling off is the step needing more, not the cache.
constexpr double kMaxPeakGrowthShareOfReservedGrowth = 0.5;
// steadyTensorGrowthPerStep needs this many samples before it can call growth steady.
constexpr std::size_t kMinSamplesForGrowth = 8;

}  // namespace

const char* deviceVerdictName(DeviceVerdict verdict) {
  switch (verdict) {
    case DeviceVerdict::kSteady:
      return "steady";
    case DeviceVerdict::kLeak:
      return "leak";
    case DeviceVerdict::kCaching:
      return "caching";
    case DeviceVerdict::kFragmentation:
      return "fragmentation";
  }
  return "unknown";
}

namespace {

std::uint64_t stepNeed(const DeviceStepSample& sample) {
  return std::max(sample.peak_allocated, sample.allocated);
}

// Reserved memory the step does not use even at its busiest: what caching or fragmentation cost.
std::uint64_t reservedAboveNeed(const DeviceStepSample& sample) {
  return minusOrZero(sample.reserved, stepNeed(sample));
}

bool muchReservedAboveNeed(const DeviceStepSample& sample) {
  std::uint64_t above = reservedAboveNeed(sample);
  return above >= kMinUnusedReservedBytes &&
         static_cast<double>(above) >=
             kMinUnusedShareOfPeak * static_cast<double>(stepNeed(sample));
}

bool looksFragmented(const DeviceStepSample& sample) {
  std::uint64_t free_in_reserved = minusOrZero(sample.reserved, sample.allocated);
  return muchReservedAboveNeed(sample) && sample.inactive_split_blocks >= kMinInactiveSplitBlocks &&
         static_cast<double>(sample.inactive_split_bytes) >=
             kMinSplitShareOfFree * static_cast<double>(free_in_reserved);
}

std::string leakHint(const DeviceMemoryDiagnosis& d, const DeviceStepSample& first) {
  return "Allocated memory (live tensors) grows by " + unsignedBytesText(d.leak_bytes_per_step) +
         " per step after warm-up and does not level off: " + unsignedBytesText(first.allocated) +
         " at step " + std::to_string(first.step) + ", " + unsignedBytesText(d.allocated) +
         " at step " + std::to_string(d.last_step) +
         ". That is a leak of live blocks, not the allocator's cache " + "(reserved " +
         unsignedBytesText(d.reserved) + "). Something keeps tensors from every step alive: " +
         "see the leak categories and sites memseal reports for them (a list they are appended " +
         "to, a loss kept with its graph, a cache without bound).";
}

std::string cachingHint(const DeviceMemoryDiagnosis& d, bool grew) {
  std::string hint =
      "Not a leak: allocated memory does not grow (" + unsignedBytesText(d.allocated) +
      " at step " + std::to_string(d.last_step) + ", at most " +
      unsignedBytesText(d.peak_allocated) + " during that step) while reserved memory is " +
      unsignedBytesText(d.reserved) + ", " + unsignedBytesText(d.reserved_above_peak) +
      " more than the step needs. That is PyTorch's caching allocator keeping "
      "freed blocks for reuse. nvidia-smi shows reserved memory, so the process "
      "looks bigger there than what its tensors use (compare "
      "torch.cuda.memory_allocated() with torch.cuda.memory_reserved()). "
      "torch.cuda.empty_cache() returns the wholly free cached segments (" +
      unsignedBytesText(d.free_segment_bytes) +
      " now) to the driver: that helps other processes on the GPU, not this "
      "process's own peak, and later allocations pay for cudaMalloc again.";
  if (grew) {
    hint += " Reserved grew by " + unsignedBytesText(d.reserved_growth) +
            " after warm-up while the step's need did not: usually tensor sizes that change "
            "from step to step, each size getting blocks of its own; steady shapes (pad or "
            "bucket variable sizes) keep it flat.";
  }
  return hint;
}

std::string oomFragmentationSentence(const OomRecord& oom) {
  return " The out-of-memory at step " + std::to_string(oom.step) + " asked for " +
         unsignedBytesText(oom.requested_bytes) + ", more than the largest free piece (" +
         unsignedBytesText(oom.largest_free_extent_on_stream) + ") although " +
         unsignedBytesText(minusOrZero(oom.reserved, oom.allocated)) +
         " were free inside reserved segments.";
}

std::string fragmentationHint(const DeviceMemoryDiagnosis& d,
                              const std::optional<OomRecord>& last_oom) {
  std::string hint =
      "Not a leak: fragmentation. Reserved memory (" + unsignedBytesText(d.reserved) + ") is " +
      fixedText(d.reserved_to_allocated, 1) + "x allocated (" + unsignedBytesText(d.allocated) +
      ") and " + std::to_string(d.inactive_split_blocks) + " free gaps totalling " +
      unsignedBytesText(d.inactive_split_bytes) +
      " sit inside segments that still hold live blocks; the largest free piece is " +
      unsignedBytesText(d.largest_free_extent) +
      ". A request larger than every piece gets a new segment instead. "
      "torch.cuda.empty_cache() does not help here: it returns only segments that are entirely "
      "free (" +
      unsignedBytesText(d.free_segment_bytes) +
      " now), not split ones. What helps: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
      "(segments grow in place instead of piling up); keeping tensor shapes steady from step to "
      "step (pad or bucket variable sizes such as sequence lengths); allocating long-lived "
      "tensors first, or memseal's planned arena / pre-allocated pools, so small long-lived "
      "blocks do not pin large segments.";
  if (d.oom_from_fragmentation && last_oom) hint += oomFragmentationSentence(*last_oom);
  return hint;
}

}  // namespace

namespace {

// The last observed sample's numbers, and the trend of allocated and reserved over the samples.
void describeSamples(const std::vector<DeviceStepSample>& observed, DeviceMemoryDiagnosis& d) {
  const DeviceStepSample& first = observed.front();
  const DeviceStepSample& last = observed.back();
  d.first_step = first.step;
  d.last_step = last.step;
  d.allocated = last.allocated;
  d.peak_allocated = stepNeed(last);
  d.reserved = last.reserved;
  d.reserved_minus_allocated = minusOrZero(last.reserved, last.allocated);
  d.reserved_above_peak = reservedAboveNeed(last);
  d.inactive_split_blocks = last.inactive_split_blocks;
  d.inactive_split_bytes = last.inactive_split_bytes;
  d.free_segment_bytes = last.free_segment_bytes;
  d.largest_free_extent = last.largest_free_extent;
  d.reserved_to_allocated = static_cast<double>(last.reserved) /
                            static_cast<double>(std::max<std::uint64_t>(1, last.allocated));
  std::vector<std::uint32_t> steps;
  std::vector<std::int64_t> allocated;
  std::vector<std::int64_t> reserved;
  for (const DeviceStepSample& sample : observed) {
    steps.push_back(sample.step);
    allocated.push_back(static_cast<std::int64_t>(sample.allocated));
    reserved.push_back(static_cast<std::int64_t>(sample.reserved));
  }
  d.allocated_slope_per_step = slopeOf(steps, allocated);
  d.reserved_slope_per_step = slopeOf(steps, reserved);
  double growth = steadyTensorGrowthPerStep(steps, allocated);
  d.leak_bytes_per_step = growth >= kMinLeakBytesPerStep ? growth : 0;
}

// What the most recent quarter of the samples (at least one), where the run has settled, says of
// the cache: fragmented, grown beyond the step's need, or held high.
struct RecentCache {
  bool fragmented = false;
  bool grew = false;
  bool high = false;
};

RecentCache recentCache(const std::vector<DeviceStepSample>& observed, DeviceMemoryDiagnosis& d) {
  std::size_t recent_begin = observed.size() - std::max<std::size_t>(1, observed.size() / 4);
  std::uint64_t recent_reserved = 0;
  std::uint64_t recent_need = 0;
  std::size_t recent_fragmented = 0;
  for (std::size_t i = recent_begin; i < observed.size(); ++i) {
    recent_reserved = std::max(recent_reserved, observed[i].reserved);
    recent_need = std::max(recent_need, stepNeed(observed[i]));
    recent_fragmented += looksFragmented(observed[i]) ? 1 : 0;
  }
  std::size_t recent = observed.size() - recent_begin;
  const DeviceStepSample& first = observed.front();
  d.reserved_growth = minusOrZero(recent_reserved, first.reserved);
  std::uint64_t need_growth = minusOrZero(recent_need, stepNeed(first));
  RecentCache cache;
  cache.fragmented = looksFragmented(observed.back()) &&
                     static_cast<double>(recent_fragmented) >=
                         kMinFragmentedShareOfRecent * static_cast<double>(recent);
  cache.grew = d.reserved_growth >= kMinUnusedReservedBytes &&
               static_cast<double>(need_growth) <
                   kMaxPeakGrowthShareOfReservedGrowth * static_cast<double>(d.reserved_growth);
  cache.high = muchReservedAboveNeed(observed.back());
  return cache;
}

std::string steadyHint(const DeviceMemoryDiagnosis& d, std::size_t observed_samples) {
  std::string hint = "Allocated memory does not keep growing after warm-up (" +
                     unsignedBytesText(d.allocated) + " at step " + std::to_string(d.last_step) +
                     ") and reserved memory (" + unsignedBytesText(d.reserved) +
                     ") stays close to what the step needs (" +
                     unsignedBytesText(d.peak_allocated) + "): nothing to fix.";
  if (observed_samples < kMinSamplesForGrowth) {
    hint += " Only " + std::to_string(observed_samples) +
            " steps were observed after warm-up; growth is judged from " +
            std::to_string(kMinSamplesForGrowth) + " on.";
  }
  return hint;
}

}  // namespace

DeviceMemoryDiagnosis diagnoseDevice(const std::vector<DeviceStepSample>& samples,
                                     std::uint32_t warmup,
                                     const std::optional<OomRecord>& last_oom) {
  DeviceMemoryDiagnosis d;
  d.oom_from_fragmentation = last_oom && oomCause(*last_oom) == OomCause::kFragmentation;
  auto observed_begin =
      std::find_if(samples.begin(), samples.end(),
                   [&](const DeviceStepSample& sample) { return sample.step >= warmup; });
  std::vector<DeviceStepSample> observed(observed_begin, samples.end());
  d.observed_samples = observed.size();
  if (observed.empty()) {
    d.verdict = d.oom_from_fragmentation ? DeviceVerdict::kFragmentation : DeviceVerdict::kSteady;
    d.hint = "No step has ended after warm-up (step " + std::to_string(warmup) +
             ") yet: there is no trend to judge.";
    if (d.oom_from_fragmentation) d.hint += oomFragmentationSentence(*last_oom);
    return d;
  }
  describeSamples(observed, d);
  RecentCache cache = recentCache(observed, d);
  if (d.leak_bytes_per_step > 0) {
    d.verdict = DeviceVerdict::kLeak;
    d.hint = leakHint(d, observed.front());
    if (d.oom_from_fragmentation) {
      d.hint += " Fragmentation made it worse." + oomFragmentationSentence(*last_oom);
    }
  } else if (cache.fragmented || d.oom_from_fragmentation) {
    d.verdict = DeviceVerdict::kFragmentation;
    d.hint = fragmentationHint(d, last_oom);
  } else if (cache.grew || cache.high) {
    d.verdict = DeviceVerdict::kCaching;
    d.hint = cachingHint(d, cache.grew);
  } else {
    d.verdict = DeviceVerdict::kSteady;
    d.hint = steadyHint(d, observed.size());
  }
  return d;
}

const char* oomCauseName(OomCause cause) {
  switch (cause) {
    case OomCause::kFragmentation:
      return "fragmentation";
    case OomCause::kProcessLimit:
      return "process-limit";
    case OomCause::kDeviceFull:
      return "device-full";
  }
  return "unknown";
}

namespace {

// Enough free memory inside the cache's segments for the request, in no piece large enough.
bool splitTooFine(const OomRecord& record) {
  return record.requested_bytes > record.largest_free_extent_on_stream &&
         minusOrZero(record.reserved, record.allocated) >= record.requested_bytes;
}

}  // namespace

OomCause oomCause(const OomRecord& record) {
  // Where the device had room, the allocator would have made a new segment whatever its cache
  // looked like: only a limit of the process's own stopped it.
  if (record.device_free_bytes >= record.requested_bytes) return OomCause::kProcessLimit;
  if (splitTooFine(record)) return OomCause::kFragmentation;
  return OomCause::kDeviceFull;
}

std::string oomExplanation(const OomRecord& record) {
  std::string request = unsignedBytesText(record.requested_bytes);
  switch (oomCause(record)) {
    case OomCause::kFragmentation: {
      std::string text = "Fragmentation, not a full device: the request of " + request +
                         " is larger than the largest free piece (" +
                         unsignedBytesText(record.largest_free_extent_on_stream) + ") although " +
                         unsignedBytesText(minusOrZero(record.reserved, record.allocated)) +
                         " of reserved memory are free (" + unsignedBytesText(record.reserved) +
                         " reserved, " + unsignedBytesText(record.allocated) + " allocated), in " +
                         std::to_string(record.inactive_split_blocks) +
                         " gaps inside segments that hold live blocks.";
      if (record.largest_free_extent >= record.requested_bytes) {
        text +=
            " A piece that large is free on another stream; each stream keeps its own "
            "cached segments.";
      }
      return text +
             " Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep shapes steady (pad or "
             "bucket variable sizes) or pre-allocate long-lived tensors; "
             "torch.cuda.empty_cache() cannot merge split segments.";
    }
    case OomCause::kProcessLimit:
      return "The device reports " + unsignedBytesText(record.device_free_bytes) +
             " free, at least the request of " + request +
             ", yet the allocation failed: this process hit a limit of its own "
             "(torch.cuda.set_per_process_memory_fraction, a MIG slice or a container limit). "
             "Allocated " +
             unsignedBytesText(record.allocated) + ", reserved " +
             unsignedBytesText(record.reserved) + "." +
             (splitTooFine(record)
                  ? " Inside that limit, " +
                        unsignedBytesText(minusOrZero(record.reserved, record.allocated)) +
                        " of reserved memory were free but split into pieces smaller than the "
                        "request (the largest " +
                        unsignedBytesText(record.largest_free_extent_on_stream) +
                        "): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets them serve it."
                  : std::string());
    case OomCause::kDeviceFull: {
      double in_use = record.reserved == 0 ? 0
                                           : 100.0 * static_cast<double>(record.allocated) /
                                                 static_cast<double>(record.reserved);
      return "The device is full: allocated " + unsignedBytesText(record.allocated) +
             " of reserved " + unsignedBytesText(record.reserved) + " (" + fixedText(in_use, 0) +
             "% in use) and only " + unsignedBytesText(record.device_free_bytes) +
             " free on the device, less than the request of " + request +
             ". Live tensors need more memory than there is: a leak (does allocated memory grow "
             "step after step? see the largest sites) or a workload too big for the device "
             "(smaller batch, activation checkpointing, mixed precision).";
    }
  }
  return "";
}

}  // namespace memseal::detect
