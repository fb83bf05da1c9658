// The replay of an out-of-memory's history (cuda_oom_replay.h). It runs under the allocator's lock,
// once per out-of-memory error: a few replays of at most kOomHistoryEvents events.
#include "explain/cuda_oom_replay.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

namespace memseal::explain {

using track::BlockHistoryEvent;
using track::LiveBlockSummary;
using track::OomHistory;
using track::OomRecord;

namespace {

CudaAllocatorEvent allocation(std::uint64_t id, std::uint64_t bytes, std::uint64_t stream) {
  return {CudaAllocatorEvent::Kind::kAlloc, id, bytes, static_cast<std::int64_t>(stream)};
}

OomSettingReplay replayed(const std::vector<CudaAllocatorEvent>& events,
                          const CudaAllocatorSettings& settings, std::uint64_t device_bytes) {
  CudaAllocatorReplay replay = replayCudaAllocator(events, settings, device_bytes);
  return {settings.text(), replay.out_of_memory_at.has_value(), replay.reserved_peak};
}

}  // namespace

std::vector<CudaAllocatorEvent> eventsLeadingTo(const OomRecord& record, const OomHistory& history,
                                                std::size_t* blocks_before_history) {
  std::vector<CudaAllocatorEvent> replayed_events;
  std::unordered_map<std::uint64_t, std::uint64_t> id_at;  // block address -> allocation id
  std::uint64_t next_id = 1;
  for (const BlockHistoryEvent& event : history.events) {
    if (event.allocation) {
      id_at[event.address] = next_id;
      replayed_events.push_back(allocation(next_id++, event.bytes, event.stream));
      continue;
    }
    auto live = id_at.find(event.address);
    if (live == id_at.end()) continue;  // allocated before the history begins
    replayed_events.push_back({CudaAllocatorEvent::Kind::kFree, live->second, 0, 0});
    id_at.erase(live);
  }
  // Blocks occupied at the error whose allocation came before the history: allocated first, in
  // the order they were made as far as the ledger knows it.
  std::vector<LiveBlockSummary> older;
  for (const LiveBlockSummary& block : history.live_blocks) {
    if (id_at.count(block.address) == 0) older.push_back(block);
  }
  if (blocks_before_history != nullptr) *blocks_before_history = older.size();
  std::sort(older.begin(), older.end(), [](const LiveBlockSummary& a, const LiveBlockSummary& b) {
    return std::tie(a.step, a.address) < std::tie(b.step, b.address);
  });
  std::vector<CudaAllocatorEvent> events;
  events.reserve(older.size() + replayed_events.size() + 1);
  for (const LiveBlockSummary& block : older) {
    events.push_back(allocation(next_id++, block.bytes, block.stream));
  }
  events.insert(events.end(), replayed_events.begin(), replayed_events.end());
  events.push_back(allocation(next_id, record.requested_bytes, record.stream));
  return events;
}

OomSettingsReplay replayOutOfMemory(const OomRecord& record, const OomHistory& history,
                                    const std::string& settings_in_effect) {
  OomSettingsReplay result;
  result.device_bytes = record.reserved + record.device_free_bytes;
  CudaAllocatorSettings in_effect;
  try {
    in_effect = CudaAllocatorSettings::parse(settings_in_effect, &result.ignored_settings);
  } catch (const std::invalid_argument& error) {
    result.unreadable_settings = error.what();
    return result;
  }
  result.settings_in_effect = in_effect.text();
  std::vector<CudaAllocatorEvent> events =
      eventsLeadingTo(record, history, &result.blocks_before_history);
  result.history_complete = history.dropped == 0 && result.blocks_before_history == 0;
  result.allocations = static_cast<std::size_t>(
      std::count_if(events.begin(), events.end(), [](const CudaAllocatorEvent& event) {
        return event.kind == CudaAllocatorEvent::Kind::kAlloc;
      }));
  result.reproduced = replayed(events, in_effect, result.device_bytes).runs_out;
  if (!result.reproduced) return result;
  for (const std::string& suggestion : suggestedAllocatorSettings()) {
    // Later keys win: the program's other settings stay as they were.
    std::vector<std::string> ignored;  // the same keys again
    CudaAllocatorSettings settings = CudaAllocatorSettings::parse(
        settings_in_effect.empty() ? suggestion : settings_in_effect + "," + suggestion, &ignored);
    if (settings.text() == result.settings_in_effect) continue;  // already in effect
    result.alternatives.push_back(replayed(events, settings, result.device_bytes));
  }
  return result;
}

}  // namespace memseal::explain
