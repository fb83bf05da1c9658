// A distributed job's merged report (memseal.merged/1): the verdict per rank, and a grid of ranks
// against causes, each cell the bytes per step that rank's finding grows by (empty where the rank
// does not have it), then one card per cause. A job of more ranks than kGridRanks shows the grid's
// first ranks and says how many more there are: the cards and the JSON hold them all.
#include <algorithm>
#include <string>

#include "report/html/html_text.h"
#include "report/html/sections.h"
#include "report/html_report.h"

namespace memseal::report::html {

namespace {

constexpr std::size_t kGridRanks = 64;

const char* statusClass(const std::string& status) {
  if (status == "leak") return "leak";
  if (status == "no_leak") return "no_leak";
  return "";
}

std::string statusWords(const std::string& status) {
  if (status == "leak") return "leak";
  if (status == "no_leak") return "no leak";
  if (status == "missing") return "missing";
  if (status == "explained") return "peak explained";
  return escapeHtml(status);
}

// The bytes per step of `finding` on `rank`, or nothing.
std::optional<double> bytesOnRank(const ReadJson& finding, double rank) {
  const ReadJson& ranks = arrayAt(finding, "ranks");
  const ReadJson& bytes = arrayAt(finding, "bytes_per_step");
  for (std::size_t i = 0; i < ranks.size() && i < bytes.size(); ++i) {
    if (numberOf(ranks[i]) == rank) return numberOf(bytes[i]);
  }
  return std::nullopt;
}

std::string rankGrid(const ReadJson& merged) {
  const ReadJson& ranks = arrayAt(merged, "ranks");
  const ReadJson& findings = arrayAt(merged, "findings");
  // A job across machines: which node each rank ran on.
  bool nodes = false;
  for (std::size_t row = 0; row < ranks.size(); ++row) nodes = nodes || ranks[row].contains("node");
  std::string out = "<div class=\"table-wrap\"><table class=\"compact\"><thead><tr><th>rank</th>" +
                    std::string(nodes ? "<th>node</th>" : "") +
                    "<th>status</th><th>steps after warm-up</th><th>peak tensor memory</th>";
  for (std::size_t i = 0; i < findings.size(); ++i) {
    out += "<th>[" + std::to_string(i + 1) + "] " + escapeHtml(textAt(findings[i], "category")) +
           "</th>";
  }
  out += "</tr></thead><tbody>";
  for (std::size_t row = 0; row < ranks.size() && row < kGridRanks; ++row) {
    const ReadJson& rank = ranks[row];
    std::string status = textAt(rank, "status");
    // The rank's own page, where the page was written beside it (memseal run's rank-N.html).
    std::string number = countText(numberAt(rank, "rank"));
    std::string page = textAt(rank, "page");
    if (!page.empty()) {
      number = "<a href=\"" + escapeHtml(page) + "\" title=\"this rank&#39;s own report\">" +
               number + "</a>";
    }
    out += "<tr>" + numCell(number);
    if (nodes) {
      out +=
          numCell(rank.contains("node") ? countText(numberAt(rank, "node")) : std::string(kDash));
    }
    out += std::string("<td><span class=\"pill ") + statusClass(status) + "\">" +
           statusWords(status) + "</span>";
    if (status == "missing") out += " " + muted(escapeHtml(textAt(rank, "missing_reason")));
    // As the rank's own report counts them ("warmup" is absent from older merged reports).
    double judged = numberOr(rank, "steps", 0) - numberOr(rank, "warmup", 0);
    out += "</td>" + numCell(status == "missing" ? kDash : countText(judged)) +
           numCell(status == "missing" ? kDash : bytesText(numberAt(rank, "peak_live_bytes")));
    double rank_number = numberOr(rank, "rank", -1);
    for (const ReadJson& finding : findings) {
      std::optional<double> bytes = bytesOnRank(finding, rank_number);
      out += numCell(bytes ? "+" + bytesText(*bytes) + "/step" : "");
    }
    out += "</tr>";
  }
  out += "</tbody></table></div>";
  if (ranks.size() > kGridRanks) {
    out += "<p class=\"muted\">The first " + std::to_string(kGridRanks) + " of " +
           std::to_string(ranks.size()) + " ranks; the findings below name every rank.</p>";
  }
  return out;
}

std::string mergedFindingCard(const ReadJson& finding, std::size_t index, double world_size) {
  const ReadJson& ranks = arrayAt(finding, "ranks");
  bool everywhere = flagAt(finding, "every_reporting_rank").value_or(false);
  std::string where = everywhere && ranks.size() > 1
                          ? "all " + countText(static_cast<double>(ranks.size())) + " ranks"
                          : countText(static_cast<double>(ranks.size())) + " " +
                                plural(static_cast<double>(ranks.size()), "rank", "ranks") +
                                " of " + countText(world_size);
  std::string out = "<article class=\"card finding\"><header><h3>[" + std::to_string(index) + "] " +
                    escapeHtml(textAt(finding, "category")) + "</h3><span class=\"pill " +
                    (everywhere ? "leak" : "") + "\">" + where + (everywhere ? "" : ", divergent") +
                    "</span></header>";
  out += "<p>made by " + codeText(textAt(finding, "op"));
  std::string site = textAt(finding, "site");
  if (!site.empty()) out += " at " + codeText(site);
  out += "</p><p>" + tensorHtml(member(finding, "tensor")) + "</p>";
  std::string holders;
  for (const ReadJson& holder : arrayAt(finding, "holders")) {
    if (holder.is_string()) holders += "<li>" + escapeHtml(holder.get<std::string>()) + "</li>";
  }
  if (!holders.empty())
    out += "<div class=\"holders\"><h4>What holds it</h4><ul>" + holders + "</ul></div>";
  return out + hintHtml("Fix", textAt(finding, "hint")) + "</article>";
}

}  // namespace

std::string mergedSection(const ReadJson& merged) {
  const ReadJson& findings = arrayAt(merged, "findings");
  double world_size = numberOr(merged, "world_size", 0);
  bool leak = textAt(merged, "verdict") == "leak";
  std::string out =
      "<section id=\"merged\"><h2>Ranks of the job</h2><div class=\"card\"><p>" +
      countText(world_size) + " ranks: <span class=\"pill " + (leak ? "leak" : "no_leak") + "\">" +
      (leak ? countText(static_cast<double>(findings.size())) + " " +
                  plural(static_cast<double>(findings.size()), "cause", "causes") + " of growth"
            : std::string("no leak on any rank that reported")) +
      "</span></p>" + rankGrid(merged) + "</div>";
  std::size_t index = 0;
  for (const ReadJson& finding : findings) {
    out += mergedFindingCard(finding.is_object() ? finding : nullJson(), ++index, world_size);
  }
  return out + notesHtml(stringsAt(merged, "notes")) + "</section>";
}

}  // namespace memseal::report::html
