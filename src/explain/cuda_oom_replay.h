// "Would another allocator setting have avoided this out-of-memory error?", asked the moment it
// happens: the block events that led to it (track's OomHistory) replayed through the model of the
// caching allocator (cuda_allocator_model.h) under the settings in effect and under each setting
// most often suggested for it. A setting is named only where the model, under the program's own
// settings, runs out as the allocator did: otherwise the history does not explain the error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "explain/cuda_allocator_model.h"
#include "track/device_ledger.h"

namespace memseal::explain {

// The allocations and frees that led to `record`, for the model: the blocks still occupied then
// whose allocation the history no longer holds first (by step, then address), then the history's
// events, then the failed request. A free of a block the history never saw allocated is left out.
// `blocks_before_history`: set to how many blocks came before the history.
std::vector<CudaAllocatorEvent> eventsLeadingTo(const track::OomRecord& record,
                                                const track::OomHistory& history,
                                                std::size_t* blocks_before_history = nullptr);

struct OomSettingReplay {
  std::string setting;  // as PYTORCH_ALLOC_CONF says it, the settings in effect included
  bool runs_out = false;
  std::uint64_t reserved_peak = 0;
};

struct OomSettingsReplay {
  std::size_t allocations = 0;  // replayed, the failed request included
  // Blocks in use at the error that were allocated before the history (before the session, or
  // among the events the ring dropped): replayed first, in a layout of the model's own.
  std::size_t blocks_before_history = 0;
  // Every block event since the session began was kept and no block came before: the replay
  // saw the whole run the allocator saw.
  bool history_complete = false;
  std::string settings_in_effect;  // PYTORCH_ALLOC_CONF's text; "" for the defaults
  // Keys of the settings in effect the model does not know (a newer torch's): replayed without.
  std::vector<std::string> ignored_settings;
  // Why the settings in effect could not be replayed ("" when they were): then nothing else is.
  std::string unreadable_settings;
  // The model ran out under the settings in effect, as the allocator did: only then are the
  // alternatives' answers worth reading.
  bool reproduced = false;
  std::uint64_t device_bytes = 0;  // what the process could take: reserved then, and free then
  std::vector<OomSettingReplay> alternatives;  // the settings in effect with each suggestion added
};

// `settings_in_effect`: the allocator's configuration string (PYTORCH_ALLOC_CONF's syntax).
OomSettingsReplay replayOutOfMemory(const track::OomRecord& record,
                                    const track::OomHistory& history,
                                    const std::string& settings_in_effect);

}  // namespace memseal::explain
