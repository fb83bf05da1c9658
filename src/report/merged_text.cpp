// MergedReport as text for people (the job's verdict, the ranks, the spread of their peaks, one
// card per cause across ranks) and as JSON for tools (memseal.merged/1, docs/merged-json.md).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/schemas.h"
#include "common/text.h"
#include "memseal/merged_report.h"
#include "report/json_fields.h"
#include "report/text_format.h"

namespace memseal {

namespace {

using Json = nlohmann::ordered_json;

// Ranks a job of thousands may print one per line no longer: up to this many, then counts.
constexpr int kRanksListed = 16;
constexpr std::size_t kRangesShown = 12;
constexpr const char* kMergedCardIndent = "              ";

// "0, 2, 5-9": ascending ranks as ranges, the first kRangesShown of them.
std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (shown == kRangesShown) {
      text += ", ... (" + std::to_string(ranks.size() - i) + " more)";
      break;
    }
    text += (shown++ ? ", " : "") + std::to_string(ranks[i]);
    if (j > i) text += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return text;
}

std::vector<int> ranksWith(const MergedReport& merged, RankStatus status) {
  std::vector<int> ranks;
  for (const RankSummary& rank : merged.ranks) {
    if (rank.status == status) ranks.push_back(rank.identity.rank);
  }
  return ranks;
}

std::string statusText(RankStatus status) {
  switch (status) {
    case RankStatus::kLeak:
      return "LEAK";
    case RankStatus::kNoLeak:
      return "no leak";
    case RankStatus::kExplained:
      return "explained";
    case RankStatus::kMissing:
      break;
  }
  return "missing";
}

// ", its step's peak 1.2 GiB (activations 700.0 MiB)" where explain measured it.
std::string explainedPeakText(const RankSummary& rank) {
  if (!rank.explained_peak) return "";
  const RankPeak& peak = *rank.explained_peak;
  std::string text = ", its step's peak " + common::bytesText(peak.peak_bytes);
  if (!peak.top_role.empty()) {
    text += " (" + peak.top_role + " " + common::bytesText(peak.top_role_bytes) + ")";
  }
  return text;
}

// "all 4 ranks, +2.0 MiB/step each" / "rank 0 only, +2.0 MiB/step" / "ranks 0-1 (2 of 4), ..."
std::string spreadText(const MergedFinding& finding, const MergedReport& merged) {
  auto [low, high] =
      std::minmax_element(finding.bytes_per_step.begin(), finding.bytes_per_step.end());
  std::string where;
  if (finding.everyReportingRank && finding.ranks.size() > 1) {
    where = "all " + std::to_string(finding.ranks.size()) + " ranks that reported";
    if (static_cast<int>(finding.ranks.size()) == merged.world_size) {
      where = "all " + std::to_string(merged.world_size) + " ranks";
    }
  } else if (finding.ranks.size() == 1) {
    where = "rank " + std::to_string(finding.ranks.front()) + " only";
  } else {
    where = "ranks " + rankList(finding.ranks) + " (" + std::to_string(finding.ranks.size()) +
            " of " + std::to_string(merged.world_size) + ")";
  }
  if (finding.example.retained == "autograd graph nodes") {
    // A graph holds little storage of its own: how many graphs a step keeps says more.
    char graphs[64];
    std::snprintf(graphs, sizeof(graphs), "%.2g", finding.example.count_per_step);
    return where + ", " + graphs + " autograd graph/step kept alive" +
           (finding.ranks.size() > 1 ? " (on rank " + std::to_string(finding.ranks.front()) + ")"
                                     : "");
  }
  std::string rate = "+" + common::bytesTextFromDouble(*high) + "/step";
  if (finding.ranks.size() > 1) {
    rate = *low >= 0.9 * *high ? rate + " each"
                               : "+" + common::bytesTextFromDouble(*low) + " to " +
                                     common::bytesTextFromDouble(*high) + "/step by rank";
  }
  if (finding.example.count_per_step > 0) {
    char count[64];
    std::snprintf(count, sizeof(count), " (%.3g tensor%s/step)", finding.example.count_per_step,
                  finding.example.count_per_step == 1.0 ? "" : "s");
    rate += count;
  }
  // Tensors kept with their graphs: the graphs cost more than the storage (a kept loss: 4 bytes).
  if (finding.example.resident_bytes_per_step > *high) {
    rate += ", resident memory +" +
            common::bytesTextFromDouble(finding.example.resident_bytes_per_step) + "/step" +
            (finding.ranks.size() > 1 ? " (on rank " + std::to_string(finding.ranks.front()) + ")"
                                      : "");
  }
  return where + ", " + rate;
}

void writeRanks(std::ostringstream& out, const MergedReport& merged) {
  if (merged.world_size <= kRanksListed) {
    for (const RankSummary& rank : merged.ranks) {
      out << "  rank " << rank.identity.rank
          << (rank.identity.nodes > 1 && rank.identity.node >= 0
                  ? " (node " + std::to_string(rank.identity.node) + ")"
                  : "")
          << ": " << statusText(rank.status);
      if (rank.status == RankStatus::kMissing) {
        out << " (" << rank.missing_reason << ")";
      } else if (rank.status == RankStatus::kExplained) {
        out << explainedPeakText(rank);
      } else {
        // Counted as the rank's own report counts them: the steps judged, after its warm-up.
        out << ", " << common::countedText(rank.findings, "finding") << " in "
            << rank.steps - rank.warmup << " steps after " << rank.warmup << " warm-up steps, peak "
            << common::bytesText(rank.peak_live_bytes);
        if (rank.peak_reserved_bytes > 0) {
          out << " (" << common::bytesText(static_cast<std::int64_t>(rank.peak_reserved_bytes))
              << " reserved on CUDA)";
        }
        out << explainedPeakText(rank);
      }
      out << "\n";
    }
    return;
  }
  for (RankStatus status :
       {RankStatus::kLeak, RankStatus::kNoLeak, RankStatus::kExplained, RankStatus::kMissing}) {
    std::vector<int> ranks = ranksWith(merged, status);
    if (!ranks.empty()) out << "  " << statusText(status) << ": ranks " << rankList(ranks) << "\n";
  }
}

// "; the largest part of the difference is activations (+800.0 KiB)", where explain measured both.
std::string roleDifference(const RankSummary& highest, const RankSummary& lowest) {
  if (!highest.explained_peak || !lowest.explained_peak) return "";
  std::string role;
  std::int64_t most = 0;
  for (const auto& [name, bytes] : highest.explained_peak->roles) {
    std::int64_t lower = 0;
    for (const auto& [other, other_bytes] : lowest.explained_peak->roles) {
      if (other == name) lower = other_bytes;
    }
    if (bytes - lower > most) {
      most = bytes - lower;
      role = name;
    }
  }
  if (role.empty()) return "";
  return "; the largest part of the difference is " + role + " (+" + common::bytesText(most) + ")";
}

// The ranks' peaks, highest against lowest, where two or more ranks reported.
void writePeaks(std::ostringstream& out, const MergedReport& merged) {
  const RankSummary* highest = nullptr;
  const RankSummary* lowest = nullptr;
  for (const RankSummary& rank : merged.ranks) {
    if (rank.status == RankStatus::kMissing) continue;
    if (highest == nullptr || rank.peak_live_bytes > highest->peak_live_bytes) highest = &rank;
    if (lowest == nullptr || rank.peak_live_bytes < lowest->peak_live_bytes) lowest = &rank;
  }
  if (highest == nullptr || highest == lowest || highest->peak_live_bytes <= 0) return;
  std::int64_t spread = highest->peak_live_bytes - lowest->peak_live_bytes;
  if (spread * 20 < highest->peak_live_bytes) return;  // within 5%: the ranks peak alike
  out << "peaks: rank " << highest->identity.rank << " highest ("
      << common::bytesText(highest->peak_live_bytes) << "), rank " << lowest->identity.rank
      << " lowest (" << common::bytesText(lowest->peak_live_bytes) << "): spread "
      << common::bytesText(spread) << " ("
      << static_cast<int>(100.0 * static_cast<double>(spread) /
                              static_cast<double>(highest->peak_live_bytes) +
                          0.5)
      << "% of the highest)" << roleDifference(*highest, *lowest) << "\n";
}

Json explainedPeakJson(const RankSummary& rank) {
  if (!rank.explained_peak) return nullptr;
  return {{"peak_bytes", rank.explained_peak->peak_bytes},
          {"peak_step", rank.explained_peak->peak_step},
          {"top_role", rank.explained_peak->top_role},
          {"top_role_bytes", rank.explained_peak->top_role_bytes}};
}

Json findingJson(const MergedFinding& finding) {
  return {{"category", categoryId(finding.category)},
          {"op", finding.op},
          {"site", finding.site},
          {"ranks", finding.ranks},
          {"bytes_per_step", finding.bytes_per_step},
          {"every_reporting_rank", finding.everyReportingRank},
          {"frames", report::framesJson(finding.example.site.frames)},
          {"tensor", report::tensorJson(finding.example.tensor)},
          {"holders", finding.holders},
          {"holders_rank", finding.holders_rank < 0 ? Json(nullptr) : Json(finding.holders_rank)},
          {"hint", finding.example.hint}};
}

}  // namespace

std::string MergedReport::toText() const {
  std::ostringstream out;
  std::vector<int> leaking = ranksWith(*this, RankStatus::kLeak);
  std::vector<int> missing = ranksWith(*this, RankStatus::kMissing);
  out << "memseal: job of " << common::countedText(world_size, "rank") << ": ";
  if (leak()) {
    out << "LEAK: " << common::countedText(findings.size(), "cause") << " on " << leaking.size()
        << " of " << world_size << " ranks";
  } else if (ranksWith(*this, RankStatus::kExplained).size() + missing.size() ==
             static_cast<std::size_t>(world_size)) {
    out << "the peaks of " << ranksWith(*this, RankStatus::kExplained).size()
        << " ranks explained (no leak check)";
  } else {
    out << "no leak on any rank that reported";
  }
  if (!missing.empty()) out << "; " << missing.size() << " missing";
  out << "\n";
  writeRanks(out, *this);
  writePeaks(out, *this);
  int index = 0;
  for (const MergedFinding& finding : findings) {
    out << "\n[" << ++index << "] " << categoryId(finding.category) << ": "
        << spreadText(finding, *this) << "\n";
    if (!finding.everyReportingRank) {
      out << "    divergent only these ranks keep it: what they run differently from the others "
             "holds it\n";
    }
    out << "    made by   " << finding.op << "\n";
    if (!finding.site.empty()) {
      std::size_t colon = finding.site.rfind(':');
      out << "    at        " << common::baseName(finding.site.substr(0, colon))
          << finding.site.substr(colon) << "\n";
    }
    out << "    tensor    " << report::tensorText(finding.example.tensor) << "\n";
    for (std::size_t i = 0; i < finding.holders.size(); ++i) {
      std::string text = finding.holders[i];
      if (i == 0 && finding.ranks.size() > 1)
        text += " (on rank " + std::to_string(finding.holders_rank) + ")";
      out << (i == 0 ? "    kept by   " : kMergedCardIndent)
          << report::wrap(text, 88, kMergedCardIndent) << "\n";
    }
    out << "    fix       " << report::wrap(finding.example.hint, 88, kMergedCardIndent) << "\n";
  }
  if (!notes.empty()) out << "\n";
  for (const std::string& note : notes) out << "note: " << report::wrap(note, 94, "      ") << "\n";
  return out.str();
}

std::string MergedReport::toJson() const {
  Json json;
  json["schema"] = common::kMergedSchema.tag();
  json["verdict"] = leak() ? "leak" : "no_leak";
  json["world_size"] = world_size;
  json["ranks"] = Json::array();
  for (const RankSummary& rank : ranks) {
    Json entry = {{"rank", rank.identity.rank},
                  {"local_rank", rank.identity.local_rank},
                  {"status", rankStatusId(rank.status)},
                  {"source", rank.source},
                  {"steps", rank.steps},
                  {"warmup", rank.warmup},
                  {"findings", rank.findings},
                  {"peak_live_bytes", rank.peak_live_bytes},
                  {"peak_reserved_bytes", rank.peak_reserved_bytes},
                  {"explained_peak", explainedPeakJson(rank)},
                  {"missing_reason", rank.missing_reason}};
    // A job across machines: the node each rank ran on (a missing rank's is not known).
    if (rank.identity.nodes > 1 && rank.identity.node >= 0) entry["node"] = rank.identity.node;
    json["ranks"].push_back(std::move(entry));
  }
  json["findings"] = Json::array();
  for (const MergedFinding& finding : findings) json["findings"].push_back(findingJson(finding));
  json["notes"] = notes;
  return json.dump(2) + "\n";
}

}  // namespace memseal
