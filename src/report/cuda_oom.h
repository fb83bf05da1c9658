// The forensics of a CUDA out-of-memory (memseal.cuda_oom/1): the device's state just before the
// request failed, why it failed, what to do, and which allocator settings would have avoided it,
// as JSON and as text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "explain/cuda_oom_replay.h"
#include "track/device_ledger.h"

namespace memseal::report {

// Sites are named through `site_name` (an empty function names them "site N"). `settings`: the
// replay of the error under other allocator settings (none: not replayed).
std::string oomForensicsJson(const track::OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name,
                             const explain::OomSettingsReplay* settings = nullptr);
std::string oomForensicsText(const track::OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name,
                             const explain::OomSettingsReplay* settings = nullptr);
// The settings replay in a line or two ("" when there is nothing to say).
std::string oomSettingsText(const explain::OomSettingsReplay& settings);

// Writes the forensics of `record` to MEMSEAL_OOM_DIR (or the working folder) as
// memseal-cuda-oom-PID-N.json, with `history` replayed under other allocator settings, and says
// so on stderr; returns the path, empty when it could not be written (stderr says why). What track
// calls when a device runs out of memory (see installOutOfMemoryWriter).
std::string writeOutOfMemoryForensics(const track::OomRecord& record,
                                      const track::OomHistory& history);

// Makes track write the forensics of every CUDA out-of-memory from now on. The library, the Python
// module and `memseal run`'s runtime call it when they load.
void installOutOfMemoryWriter();

}  // namespace memseal::report
