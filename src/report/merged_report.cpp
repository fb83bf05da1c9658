// A distributed job's ranks side by side (memseal/merged_report.h): the merge, its text and its
// JSON (memseal.merged/1), and the rank a process is, from the variables its launcher set.
#include "memseal/merged_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "common/schemas.h"
#include "common/text.h"
#include "report/finding_cause.h"
#include "report/json_fields.h"
#include "report/text_format.h"

namespace memseal {

const char* const kMergedReportSchema = common::kMergedSchema.name;
const int kMergedReportVersion = common::kMergedSchema.version;

namespace {

using report::causeSite;

std::optional<int> environmentNumber(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > report::kMaxWorldSize) return std::nullopt;
  return static_cast<int>(value);
}

RankSummary summarize(const RankReport& entry, const RankIdentity& identity) {
  RankSummary summary;
  summary.identity = identity;
  summary.source = entry.source;
  summary.explained_peak = entry.peak;
  if (!entry.report) {
    if (entry.peak) {
      summary.status = RankStatus::kExplained;
      summary.peak_live_bytes = entry.peak->peak_bytes;
      return summary;
    }
    summary.status = RankStatus::kMissing;
    summary.missing_reason =
        entry.missing_reason.empty() ? "it left no report" : entry.missing_reason;
    return summary;
  }
  const LeakReport& report = *entry.report;
  summary.status = report.leak ? RankStatus::kLeak : RankStatus::kNoLeak;
  summary.steps = report.steps;
  summary.warmup = std::min(report.warmup, report.steps);
  summary.findings = report.findings.size();
  for (const StepSample& sample : report.per_step) {
    summary.peak_live_bytes = std::max(summary.peak_live_bytes, sample.live_bytes);
  }
  for (const DeviceMemorySummary& device : report.devices) {
    summary.peak_reserved_bytes = std::max(summary.peak_reserved_bytes, device.peak_reserved);
  }
  // The step's own peak, where explain measured it, says more than the step boundaries'.
  if (entry.peak) {
    summary.peak_live_bytes = std::max(summary.peak_live_bytes, entry.peak->peak_bytes);
  }
  return summary;
}

// Every entry's rank: its own where it names one, else the lowest rank no entry names.
std::vector<RankIdentity> rankIdentities(const std::vector<RankReport>& entries, int* world_size) {
  std::vector<bool> named;
  *world_size = 0;
  for (const RankReport& entry : entries) {
    if (entry.identity.world_size <= 0) continue;
    *world_size = std::max({*world_size, entry.identity.world_size, entry.identity.rank + 1});
    if (named.size() <= static_cast<std::size_t>(entry.identity.rank)) {
      named.resize(entry.identity.rank + 1, false);
    }
    named[entry.identity.rank] = true;
  }
  std::vector<RankIdentity> result;
  int next_free = 0;
  for (const RankReport& entry : entries) {
    if (entry.identity.world_size > 0) {
      result.push_back(entry.identity);
      continue;
    }
    while (next_free < static_cast<int>(named.size()) && named[next_free]) ++next_free;
    RankIdentity identity;
    identity.rank = identity.local_rank = next_free++;
    result.push_back(identity);
  }
  *world_size = std::max(*world_size, next_free);
  for (RankIdentity& identity : result) identity.world_size = *world_size;
  return result;
}

void mergeFindings(const std::vector<const LeakReport*>& by_rank, MergedReport& merged) {
  std::unordered_map<std::string, std::size_t> index_of;
  std::size_t reporting = 0;
  for (std::size_t rank = 0; rank < by_rank.size(); ++rank) {
    if (by_rank[rank] == nullptr) continue;
    ++reporting;
    const LeakReport& report = *by_rank[rank];
    for (std::size_t index = 0; index < report.findings.size(); ++index) {
      const LeakFinding& finding = report.findings[index];
      std::string site = causeSite(finding.site.frames);
      std::string key =
          std::string(categoryId(finding.category)) + "|" + finding.site.op + "|" + site;
      auto [at, inserted] = index_of.emplace(key, merged.findings.size());
      if (inserted) {
        MergedFinding fresh;
        fresh.category = finding.category;
        fresh.op = finding.site.op;
        fresh.site = site;
        fresh.example = finding;
        merged.findings.push_back(std::move(fresh));
      }
      MergedFinding& target = merged.findings[at->second];
      // What holds it on the lowest rank whose report names a holder.
      for (const LeakHolder& holder : report.holders) {
        bool first_naming = target.holders.empty() || target.holders_rank == static_cast<int>(rank);
        if (holder.finding == static_cast<int>(index) && first_naming) {
          target.holders.push_back(holder.description);
          target.holders_rank = static_cast<int>(rank);
        }
      }
      if (!target.ranks.empty() && target.ranks.back() == static_cast<int>(rank)) {
        target.bytes_per_step.back() += finding.bytes_per_step;  // two parts of one cause
        continue;
      }
      target.ranks.push_back(static_cast<int>(rank));
      target.bytes_per_step.push_back(finding.bytes_per_step);
    }
  }
  for (MergedFinding& finding : merged.findings) {
    finding.everyReportingRank = finding.ranks.size() == reporting;
  }
  auto most = [](const MergedFinding& finding) {
    return *std::max_element(finding.bytes_per_step.begin(), finding.bytes_per_step.end());
  };
  std::stable_sort(merged.findings.begin(), merged.findings.end(),
                   [&](const MergedFinding& a, const MergedFinding& b) {
                     if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
                     return most(a) > most(b);
                   });
}

}  // namespace

std::optional<RankIdentity> rankFromEnvironment() {
  std::optional<int> rank = environmentNumber("RANK");
  std::optional<int> world_size = environmentNumber("WORLD_SIZE");
  if (!rank || !world_size || *world_size < 1 || *rank >= *world_size) return std::nullopt;
  RankIdentity identity;
  identity.rank = *rank;
  identity.world_size = *world_size;
  identity.local_rank = environmentNumber("LOCAL_RANK").value_or(*rank);
  std::optional<int> nodes = environmentNumber("GROUP_WORLD_SIZE");
  std::optional<int> node = environmentNumber("GROUP_RANK");
  if (nodes && node && *nodes > 1 && *node < *nodes) {
    identity.nodes = *nodes;
    identity.node = *node;
  }
  const char* run_id = std::getenv("TORCHELASTIC_RUN_ID");
  // torchrun's default rendezvous id is "none": no id the user gave.
  if (run_id != nullptr && std::string(run_id) != "none") identity.run_id = run_id;
  return identity;
}

RankReport rankReportFromJson(const std::string& json, const std::string& source) {
  RankReport rank;
  rank.source = source;
  nlohmann::ordered_json document =
      nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  std::string schema =
      document.is_object() && document.contains("schema") && document["schema"].is_string()
          ? document["schema"].get<std::string>()
          : "";
  if (schema.rfind(std::string(common::kExplainSchema.name) + "/", 0) != 0) {
    LeakReport report = LeakReport::fromJson(json);  // says what is wrong with anything else
    rank.identity = report.rank.value_or(RankIdentity{0, 0, 0, ""});
    rank.report = std::move(report);
    return rank;
  }
  if (schema != common::kExplainSchema.tag()) {
    throw std::invalid_argument("a " + schema + " document: this memseal reads " +
                                common::kExplainSchema.tag());
  }
  RankPeak peak;
  peak.peak_bytes = report::read<std::int64_t>(document, "peak_bytes", "explain");
  peak.peak_step = report::read<std::uint32_t>(document, "peak_step", "explain");
  if (peak.peak_bytes < 0) report::fail("explain.peak_bytes is negative");
  const nlohmann::ordered_json& roles =
      document.contains("roles") ? document["roles"] : nlohmann::ordered_json::array();
  if (!roles.is_array()) report::fail("explain.roles is not an array");
  for (std::size_t i = 0; i < roles.size(); ++i) {
    std::string where = "explain.roles[" + std::to_string(i) + "]";
    std::string role = report::read<std::string>(roles[i], "role", where);
    std::int64_t bytes = report::read<std::int64_t>(roles[i], "bytes", where);
    if (bytes < 0) report::fail(where + ".bytes is negative");
    peak.roles.emplace_back(role, bytes);
    if (bytes > peak.top_role_bytes) {
      peak.top_role = role;
      peak.top_role_bytes = bytes;
    }
  }
  rank.peak = peak;
  rank.identity.world_size = 0;  // unknown unless it names its rank
  if (document.contains("rank") && !document["rank"].is_null()) {
    rank.identity = report::readRank(document["rank"], "explain.rank");
  }
  return rank;
}

std::string otherJobs(const std::vector<RankReport>& ranks) {
  std::map<std::string, std::vector<std::string>> sources_by_run;
  for (const RankReport& rank : ranks) {
    if (!rank.identity.run_id.empty()) {
      sources_by_run[rank.identity.run_id].push_back(rank.source);
    }
  }
  if (sources_by_run.size() < 2) return "";
  std::string why = "the reports are of " + std::to_string(sources_by_run.size()) + " jobs (";
  bool first = true;
  for (const auto& [run_id, sources] : sources_by_run) {
    why += (first ? "" : "; ") + std::string("run id ") + run_id + ": " + sources.front();
    if (sources.size() > 1) why += " and " + std::to_string(sources.size() - 1) + " more";
    first = false;
  }
  return why + "); merge the reports of one job";
}

const char* rankStatusId(RankStatus status) {
  switch (status) {
    case RankStatus::kNoLeak:
      return "no_leak";
    case RankStatus::kLeak:
      return "leak";
    case RankStatus::kMissing:
      return "missing";
    case RankStatus::kExplained:
      return "explained";
  }
  return "missing";
}

MergedReport mergeRankReports(const std::vector<RankReport>& entries) {
  MergedReport merged;
  std::vector<RankIdentity> ids = rankIdentities(entries, &merged.world_size);
  merged.ranks.resize(merged.world_size);
  for (int rank = 0; rank < merged.world_size; ++rank) {
    merged.ranks[rank].identity.rank = merged.ranks[rank].identity.local_rank = rank;
    merged.ranks[rank].identity.world_size = merged.world_size;
    merged.ranks[rank].missing_reason = "it never reported (not started, or not traced)";
  }
  std::vector<const LeakReport*> by_rank(merged.world_size, nullptr);
  std::vector<bool> seen(merged.world_size, false);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    int rank = ids[i].rank;
    if (seen[rank]) {
      merged.notes.push_back("rank " + std::to_string(rank) + " reported twice (" +
                             merged.ranks[rank].source + ", " + entries[i].source +
                             "): the first is shown");
      continue;
    }
    seen[rank] = true;
    merged.ranks[rank] = summarize(entries[i], ids[i]);
    if (entries[i].report) by_rank[rank] = &*entries[i].report;
  }
  mergeFindings(by_rank, merged);
  return merged;
}

}  // namespace memseal
