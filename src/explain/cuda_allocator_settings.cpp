#include "explain/cuda_allocator_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <stdexcept>

#include "common/text.h"

namespace memseal::explain {

namespace {

using namespace cuda_sizes;

constexpr int kFirstDivisionInterval = 20;  // log2 of 1 MiB, where the intervals begin

std::uint64_t roundUp(std::uint64_t bytes, std::uint64_t unit) {
  return unit * ((bytes + unit - 1) / unit);
}

int floorLog2(std::uint64_t value) { return 63 - __builtin_clzll(value); }

bool powerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

std::uint32_t divisionsFor(std::uint64_t bytes, const CudaAllocatorSettings& settings) {
  int log_size = floorLog2(bytes);
  std::size_t index = log_size > kFirstDivisionInterval
                          ? static_cast<std::size_t>(log_size - kFirstDivisionInterval)
                          : 0;
  index = std::min(index, settings.roundup_power2_divisions.size() - 1);
  return settings.roundup_power2_divisions[index];
}

// roundup_power2_next_division: the next of `divisions` equal steps between two powers of two.
std::uint64_t nextDivision(std::uint64_t bytes, std::uint32_t divisions) {
  if (powerOfTwo(bytes)) return bytes;
  std::uint64_t floor = std::uint64_t{1} << floorLog2(bytes);
  std::uint64_t step = floor >> floorLog2(divisions);
  if (step == 0) return floor << 1;
  std::uint64_t rounded_down = bytes & ~(step - 1);
  return rounded_down == bytes ? bytes : rounded_down + step;
}

std::string trimmed(const std::string& text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

// KEY:VALUE items separated by commas, a bracketed value ([256:1,>:4]) kept whole.
std::vector<std::string> items(const std::string& conf) {
  std::vector<std::string> found;
  std::string item;
  int depth = 0;
  for (char c : conf) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      found.push_back(trimmed(item));
      item.clear();
    } else {
      item += c;
    }
  }
  found.push_back(trimmed(item));
  return found;
}

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw std::invalid_argument("allocator setting " + key + ": " + why);
}

std::uint64_t unsignedValue(const std::string& key, const std::string& value) {
  if (value.empty() || value.size() > 18 ||
      !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    refuse(key, "'" + value + "' is not a whole number");
  }
  return std::stoull(value);
}

double fractionValue(const std::string& key, const std::string& value) {
  std::size_t used = 0;
  double fraction = 0;
  try {
    fraction = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) refuse(key, "'" + value + "' is not a number");
  return fraction;
}

std::uint32_t divisionsValue(const std::string& key, const std::string& value) {
  std::uint64_t divisions = unsignedValue(key, value);
  if (divisions != 0 && !powerOfTwo(divisions)) refuse(key, "divisions must be a power of 2");
  if (divisions > 1024) refuse(key, "at most 1024 divisions");
  return static_cast<std::uint32_t>(divisions);
}

// roundup_power2_divisions:N (every interval), or [MB:N,...,>:N] (an interval from MB MiB on, the
// ones below the first given taking its divisions too, and > for the rest).
void parseDivisions(const std::string& key, const std::string& value,
                    std::vector<std::uint32_t>& divisions) {
  if (value.empty() || value.front() != '[') {
    std::uint32_t count = divisionsValue(key, value);
    if (count == 0) refuse(key, "divisions must be a power of 2");  // 0 only in a list
    std::fill(divisions.begin(), divisions.end(), count);
    return;
  }
  if (value.back() != ']') refuse(key, "'" + value + "' has no closing ]");
  std::size_t last = 0;  // as torch 2.9 on: > fills the intervals after the last one given
  bool first = true;
  for (const std::string& pair : items(value.substr(1, value.size() - 2))) {
    std::size_t colon = pair.find(':');
    if (colon == std::string::npos) refuse(key, "'" + pair + "' is not SIZE_MB:DIVISIONS");
    std::string interval = trimmed(pair.substr(0, colon));
    std::uint32_t count = divisionsValue(key, trimmed(pair.substr(colon + 1)));
    if (interval == ">") {
      std::fill(divisions.begin() + static_cast<std::ptrdiff_t>(last + 1), divisions.end(), count);
      continue;
    }
    std::uint64_t megabytes = unsignedValue(key, interval);
    if (!powerOfTwo(megabytes)) refuse(key, "the interval " + interval + " is not a power of 2");
    std::size_t index = std::min<std::size_t>(floorLog2(megabytes), divisions.size() - 1);
    if (first)
      std::fill(divisions.begin(), divisions.begin() + static_cast<std::ptrdiff_t>(index), count);
    divisions[index] = count;
    last = index;
    first = false;
  }
}

// Keys of PYTORCH_CUDA_ALLOC_CONF that change nothing the model counts.
bool ignoredKey(const std::string& key) {
  static const std::set<std::string> kIgnored = {
      "pinned_use_cuda_host_register", "pinned_num_register_threads",
      "pinned_use_background_threads", "pinned_reserve_segment_size_mb",
      "release_lock_on_cudamalloc",    "graph_capture_record_stream_reuse"};
  return kIgnored.count(key) != 0;
}

}  // namespace

CudaAllocatorSettings CudaAllocatorSettings::parse(const std::string& conf,
                                                   std::vector<std::string>* unknown_keys) {
  CudaAllocatorSettings settings;
  for (const std::string& item : items(conf)) {
    if (item.empty()) continue;
    std::size_t colon = item.find(':');
    if (colon == std::string::npos) refuse(item, "not KEY:VALUE");
    std::string key = trimmed(item.substr(0, colon));
    std::string value = trimmed(item.substr(colon + 1));
    if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
      std::uint64_t megabytes = unsignedValue(key, value);
      if (megabytes < kLargeBuffer / kMiB) refuse(key, "must be 20 or more");
      if (megabytes > (std::uint64_t{1} << 40)) refuse(key, "'" + value + "' is too large");
      if (key == "max_split_size_mb") {
        settings.max_split_size = megabytes * kMiB;
      } else {
        settings.max_non_split_rounding = megabytes * kMiB;
      }
    } else if (key == "garbage_collection_threshold") {
      double threshold = fractionValue(key, value);
      if (!(threshold > 0 && threshold < 1)) refuse(key, "must lie between 0 and 1");
      settings.garbage_collection_threshold = threshold;
    } else if (key == "expandable_segments") {
      if (value != "True" && value != "False") refuse(key, "must be True or False");
      settings.expandable_segments = value == "True";
    } else if (key == "roundup_power2_divisions") {
      parseDivisions(key, value, settings.roundup_power2_divisions);
    } else if (key == "per_process_memory_fraction") {
      double fraction = fractionValue(key, value);
      if (!(fraction > 0 && fraction <= 1)) refuse(key, "must lie in (0, 1]");
      settings.memory_fraction = fraction;
    } else if (key == "backend") {
      if (value != "native") refuse(key, "only the native caching allocator is modelled");
    } else if (!ignoredKey(key)) {
      if (unknown_keys == nullptr) refuse(key, "not a setting of the caching allocator");
      unknown_keys->push_back(key);
    }
  }
  return settings;
}

std::string CudaAllocatorSettings::text() const {
  std::vector<std::string> parts;
  if (max_split_size)
    parts.push_back("max_split_size_mb:" + std::to_string(*max_split_size / kMiB));
  bool uniform = std::all_of(roundup_power2_divisions.begin(), roundup_power2_divisions.end(),
                             [&](std::uint32_t d) { return d == roundup_power2_divisions[0]; });
  if (uniform && roundup_power2_divisions[0] != 0) {
    parts.push_back("roundup_power2_divisions:" + std::to_string(roundup_power2_divisions[0]));
  } else if (!uniform) {
    std::string list;
    for (std::size_t i = 0; i < roundup_power2_divisions.size(); ++i) {
      list += (i ? "," : "") + std::to_string(std::uint64_t{1} << i) + ":" +
              std::to_string(roundup_power2_divisions[i]);
    }
    parts.push_back("roundup_power2_divisions:[" + list + "]");
  }
  if (garbage_collection_threshold > 0) {
    parts.push_back("garbage_collection_threshold:" +
                    common::fixedText(garbage_collection_threshold, 2));
  }
  if (expandable_segments) parts.push_back("expandable_segments:True");
  if (max_non_split_rounding != kLargeBuffer) {
    parts.push_back("max_non_split_rounding_mb:" + std::to_string(max_non_split_rounding / kMiB));
  }
  if (memory_fraction) {
    parts.push_back("per_process_memory_fraction:" + common::fixedText(*memory_fraction, 2));
  }
  return common::joinedText(parts, ",");
}

std::uint64_t roundedBlockSize(std::uint64_t bytes, const CudaAllocatorSettings& settings) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  std::uint32_t divisions = divisionsFor(bytes, settings);
  if (divisions > 1 && bytes > kMinBlockSize * divisions) return nextDivision(bytes, divisions);
  return roundUp(bytes, kMinBlockSize);
}

std::uint64_t segmentSize(std::uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return roundUp(rounded, kRoundLarge);
}

const std::vector<std::string>& suggestedAllocatorSettings() {
  static const std::vector<std::string> kSuggested = {
      "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"};
  return kSuggested;
}

std::string allocatorSettingsInEffect() {
  for (const char* variable : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr) return value;
  }
  return "";
}

}  // namespace memseal::explain
