// The forensics of a CUDA out-of-memory, written when it happens (track calls the writer that
// installOutOfMemoryWriter gives it).
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

}  // namespace

std::string oomForensicsJson(const OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name) {
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
  return json.dump(2);
}

std::string oomForensicsText(const OomRecord& record,
                             const std::function<std::string(std::uint32_t site)>& site_name) {
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

std::string writeOutOfMemoryForensics(const OomRecord& record, int device) {
  static std::atomic<int> files{0};
  const char* folder = std::getenv("MEMSEAL_OOM_DIR");
  std::string path = std::string(folder != nullptr && *folder != '\0' ? folder : ".") +
                     "/memseal-cuda-oom-" + std::to_string(getpid()) + "-" +
                     std::to_string(++files) + ".json";
  std::string error;
  if (!common::writeFileAtomically(path, oomForensicsJson(record, track::deviceSiteLabel),
                                   &error)) {
    std::fprintf(stderr,
                 "memseal: CUDA out of memory on cuda:%d; its forensics could not be "
                 "written to %s: %s\n",
                 device, path.c_str(), error.c_str());
    return "";
  }
  std::fprintf(stderr,
               "memseal: CUDA out of memory on cuda:%d (%s requested, %s allocated, %s reserved, "
               "step %u): %s What was live is in %s\n",
               device, unsignedBytesText(record.requested_bytes).c_str(),
               unsignedBytesText(record.allocated).c_str(),
               unsignedBytesText(record.reserved).c_str(), record.step,
               oomExplanation(record).c_str(), path.c_str());
  return path;
}

void installOutOfMemoryWriter() { track::setOutOfMemoryWriter(&writeOutOfMemoryForensics); }

}  // namespace memseal::report
