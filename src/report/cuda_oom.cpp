// The forensics of a CUDA out-of-memory, written when it happens (track calls the writer that
// installOutOfMemoryWriter gives it), with the replay of what led there under other allocator
// settings (explain/cuda_oom_replay.h).
#include "report/cuda_oom.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/schemas.h"
#include "common/text.h"
#include "detect/device_diagnosis.h"
#include "track/device_events.h"

namespace memseal::report {

using common::minusOrZero;
using common::unsignedBytesText;
using detect::oomCause;
using detect::oomCauseName;
using detect::oomExplanation;
using track::LiveBlockGroup;
using track::LiveBlockSummary;
using track::OomRecord;

namespace {

std::string nameOf(const std::function<std::string(std::uint32_t)>& site_name, std::uint32_t site) {
  return site_name ? site_name(site) : "site " + std::to_string(site);
}

nlohmann::ordered_json settingsJson(const explain::OomSettingsReplay& settings) {
  nlohmann::ordered_json json;
  if (!settings.unreadable_settings.empty()) {
    json["unreadable_settings"] = settings.unreadable_settings;
    return json;
  }
  json["settings_in_effect"] = settings.settings_in_effect;
  json["ignored_settings"] = settings.ignored_settings;
  json["allocations_replayed"] = settings.allocations;
  json["history_complete"] = settings.history_complete;
  json["blocks_before_history"] = settings.blocks_before_history;
  json["device_bytes"] = settings.device_bytes;
  json["reproduced"] = settings.reproduced;
  nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
  for (const explain::OomSettingReplay& alternative : settings.alternatives) {
    alternatives.push_back({{"setting", alternative.setting},
                            {"avoids_the_error", !alternative.runs_out},
                            {"reserved_peak_bytes", alternative.reserved_peak}});
  }
  json["alternatives"] = std::move(alternatives);
  return json;
}

}  // namespace

std::string oomSettingsText(const explain::OomSettingsReplay& settings) {
  if (!settings.unreadable_settings.empty()) {
    return "  other allocator settings not tried: " + settings.unreadable_settings + "\n";
  }
  std::string replayed = "memseal's model of the allocator, replaying " +
                         common::countedText(settings.allocations, "allocation");
  if (settings.blocks_before_history > 0) {
    replayed += " (" + common::countedText(settings.blocks_before_history, "block") +
                " in use from before the events it kept)";
  } else if (!settings.history_complete) {
    replayed += " (the session's oldest events were not kept)";
  }
  if (!settings.ignored_settings.empty()) {
    replayed += " without the settings it does not know (" +
                common::joinedText(settings.ignored_settings, ", ") + ")";
  }
  if (!settings.reproduced) {
    return "  " + replayed +
           ", did not run out under the settings in effect: it judges no other setting\n";
  }
  std::string avoiding;
  std::vector<std::string> not_avoiding;
  for (const explain::OomSettingReplay& alternative : settings.alternatives) {
    if (alternative.runs_out) {
      not_avoiding.push_back(alternative.setting);
    } else {
      avoiding += "    PYTORCH_CUDA_ALLOC_CONF=" + alternative.setting + "  (reserved peak " +
                  unsignedBytesText(alternative.reserved_peak) + ")\n";
    }
  }
  if (avoiding.empty()) {
    return "  " + replayed + ", runs out under every setting tried (" +
           common::joinedText(not_avoiding, ", ") +
           "): what was in use needs more than the device had, whatever the cache does\n";
  }
  std::string text =
      "  " + replayed + ", runs out as the allocator did; this would have avoided it:\n" + avoiding;
  if (!not_avoiding.empty()) text += "    (not " + common::joinedText(not_avoiding, ", ") + ")\n";
  return text;
}

std::string oomForensicsJson(const OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name,
                             const explain::OomSettingsReplay* settings) {
  using Json = nlohmann::ordered_json;
  Json json;
  json["schema"] = common::kCudaOomSchema.tag();
  json["cause"] = oomCauseName(oomCause(record));
  json["explanation"] = oomExplanation(record);
  json["device"] = record.device;
  json["step"] = record.step;
  json["requested_bytes"] = record.requested_bytes;
  json["stream"] = record.stream;
  json["allocated_bytes"] = record.allocated;
  json["reserved_bytes"] = record.reserved;
  json["free_in_reserved_bytes"] = minusOrZero(record.reserved, record.allocated);
  json["device_free_bytes"] = record.device_free_bytes;
  json["largest_free_extent_bytes"] = record.largest_free_extent;
  json["largest_free_extent_on_stream_bytes"] = record.largest_free_extent_on_stream;
  json["inactive_split_blocks"] = record.inactive_split_blocks;
  json["inactive_split_bytes"] = record.inactive_split_bytes;
  Json sites = Json::array();
  for (const LiveBlockGroup& group : record.largest_sites) {
    Json site;
    site["site"] = group.site;
    site["name"] = nameOf(site_name, group.site);
    site["blocks"] = group.blocks;
    site["bytes"] = group.bytes;
    sites.push_back(std::move(site));
  }
  json["largest_sites"] = std::move(sites);
  Json blocks = Json::array();
  for (const LiveBlockSummary& block : record.largest_blocks) {
    Json entry;
    entry["address"] = common::hexAddress(static_cast<std::uintptr_t>(block.address));
    entry["bytes"] = block.bytes;
    entry["site"] = block.site;
    entry["name"] = nameOf(site_name, block.site);
    entry["step"] = block.step;
    entry["stream"] = block.stream;
    blocks.push_back(std::move(entry));
  }
  json["largest_blocks"] = std::move(blocks);
  if (settings != nullptr) json["allocator_settings"] = settingsJson(*settings);
  return json.dump(2);
}

std::string oomForensicsText(const OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name,
                             const explain::OomSettingsReplay* settings) {
  std::string text = "CUDA out of memory on device " + std::to_string(record.device) + " at step " +
                     std::to_string(record.step) + ": a request of " +
                     unsignedBytesText(record.requested_bytes) + " failed (" +
                     oomCauseName(oomCause(record)) + ").\n";
  text += "  " + oomExplanation(record) + "\n";
  text += "  allocated " + unsignedBytesText(record.allocated) + ", reserved " +
          unsignedBytesText(record.reserved) + " (" +
          unsignedBytesText(minusOrZero(record.reserved, record.allocated)) +
          " free inside), device free " + unsignedBytesText(record.device_free_bytes) + "\n";
  text += "  largest free piece " + unsignedBytesText(record.largest_free_extent) + " (" +
          unsignedBytesText(record.largest_free_extent_on_stream) + " on the request's stream); " +
          std::to_string(record.inactive_split_blocks) + " gaps inside used segments, " +
          unsignedBytesText(record.inactive_split_bytes) + "\n";
  if (settings != nullptr) text += oomSettingsText(*settings);
  if (!record.largest_sites.empty()) text += "  largest live sites:\n";
  for (const LiveBlockGroup& group : record.largest_sites) {
    text += "    " + unsignedBytesText(group.bytes) + " in " +
            common::countedText(group.blocks, "block") + "  " + nameOf(site_name, group.site) +
            "\n";
  }
  if (!record.largest_blocks.empty()) text += "  largest live blocks:\n";
  for (const LiveBlockSummary& block : record.largest_blocks) {
    text += "    " + unsignedBytesText(block.bytes) + " at " +
            common::hexAddress(static_cast<std::uintptr_t>(block.address)) + ", step " +
            std::to_string(block.step) + "  " + nameOf(site_name, block.site) + "\n";
  }
  return text;
}

std::string writeOutOfMemoryForensics(const OomRecord& record, const track::OomHistory& history) {
  static std::atomic<int> files{0};
  const char* folder = std::getenv("MEMSEAL_OOM_DIR");
  std::string path = std::string(folder != nullptr && *folder != '\0' ? folder : ".") +
                     "/memseal-cuda-oom-" + std::to_string(getpid()) + "-" +
                     std::to_string(++files) + ".json";
  explain::OomSettingsReplay settings =
      explain::replayOutOfMemory(record, history, explain::allocatorSettingsInEffect());
  std::string error;
  if (!common::writeFileAtomically(
          path, oomForensicsJson(record, track::deviceSiteLabel, &settings), &error)) {
    std::fprintf(stderr,
                 "memseal: CUDA out of memory on cuda:%d; its forensics could not be "
                 "written to %s: %s\n",
                 record.device, path.c_str(), error.c_str());
    return "";
  }
  std::string avoided_by;
  for (const explain::OomSettingReplay& alternative : settings.alternatives) {
    if (!alternative.runs_out && settings.reproduced) {
      avoided_by =
          " Replaying the run, memseal's model of the allocator says "
          "PYTORCH_CUDA_ALLOC_CONF=" +
          alternative.setting + " would have avoided it (reserved peak " +
          unsignedBytesText(alternative.reserved_peak) + ").";
      break;
    }
  }
  std::fprintf(stderr,
               "memseal: CUDA out of memory on cuda:%d (%s requested, %s allocated, %s reserved, "
               "step %u): %s%s What was live is in %s\n",
               record.device, unsignedBytesText(record.requested_bytes).c_str(),
               unsignedBytesText(record.allocated).c_str(),
               unsignedBytesText(record.reserved).c_str(), record.step,
               oomExplanation(record).c_str(), avoided_by.c_str(), path.c_str());
  return path;
}

void installOutOfMemoryWriter() { track::setOutOfMemoryWriter(&writeOutOfMemoryForensics); }

}  // namespace memseal::report
