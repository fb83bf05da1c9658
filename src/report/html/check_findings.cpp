// The check section: one card per finding (growth, parts, holders, stack, fix), the top sites,
// Python's additions, and the section that puts them after the verdict and timeline.
#include "report/html/sections.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/text.h"
#include "report/html/html_text.h"
#include "report/html/svg_chart.h"
#include "report/html_report.h"

namespace memseal::report::html {

using common::baseName;

namespace {

std::string growthTiles(const ReadJson& finding) {
  std::string out = "<div class=\"tiles small\">";
  auto perStep = [&](const char* key) {
    std::optional<double> rate = numberAt(finding, key);
    return rate ? "+" + bytesText(*rate) + "/step" : std::string(kDash);
  };
  std::optional<double> count = numberAt(finding, "count_per_step");
  std::string retained = textAt(finding, "retained");
  if (textAt(finding, "category") == "untracked-growth") {
    out += tile("grows", perStep("bytes_per_step"), "resident memory beyond tracked");
    out += tile("explained by tensors and graphs", perStep("explained_bytes_per_step"));
    return out + "</div>";
  }
  bool graphs = retained == "autograd graph nodes";
  out += tile("grows", perStep("bytes_per_step"), graphs ? "resident memory" : "");
  out += tile("per step", countText(count),
              graphs ? plural(count.value_or(0), "autograd graph", "autograd graphs")
                     : plural(count.value_or(0), "allocation", "allocations"));
  std::optional<double> survivors = numberAt(finding, "survivors");
  std::optional<double> survivor_bytes = numberAt(finding, "survivor_bytes");
  out += tile("retained at the end", countText(survivors),
              graphs           ? "autograd graphs"
              : survivor_bytes ? bytesText(*survivor_bytes)
                               : "");
  // Tensors kept with their autograd graphs: what the graphs cost beyond the storage.
  std::optional<double> resident = numberAt(finding, "resident_bytes_per_step");
  if (!graphs && resident && *resident > numberAt(finding, "bytes_per_step").value_or(0)) {
    out += tile("resident memory", perStep("resident_bytes_per_step"), "with the kept graphs");
  }
  std::optional<double> with = numberAt(finding, "steps_with_survivors");
  std::optional<double> observed = numberAt(finding, "steps_observed");
  if (with || observed) {
    out += tile("steps with survivors", countText(with), "of " + countText(observed) + " observed");
  }
  return out + "</div>";
}

std::string partsHtml(const ReadJson& parts) {
  if (!parts.is_array() || parts.empty()) return "";
  std::string out =
      "<h4>What it holds</h4><div class=\"table-wrap\"><table class=\"parts\"><thead><tr>"
      "<th>retained</th><th class=\"num\">per step</th><th class=\"num\">count/step</th>"
      "<th class=\"num\">survivors</th><th>made by</th><th>scope</th><th>tensor</th>"
      "<th>stack</th></tr></thead><tbody>";
  for (const ReadJson& part : parts) {
    if (!part.is_object()) continue;
    double rate = numberOr(part, "bytes_per_step", 0);
    bool graphs = textAt(part, "retained") == "autograd graph nodes";
    out += "<tr>" + cell(escapeHtml(textAt(part, "retained"))) +
           numCell(orDash(rate, "+" + bytesText(rate))) +
           numCell(countText(numberOr(part, "count_per_step", 0))) +
           numCell(countText(numberAt(part, "survivors")) +
                   (graphs ? "" : "<br>" + muted(bytesText(numberAt(part, "survivor_bytes"))))) +
           cell(opHtml(part)) + cell(scopeHtml(part)) +
           cell(tensorHtml(member(part, "tensor"), member(part, "shapes")));
    const ReadJson& frames = member(part, "frames");
    out += cell(frames.is_array() && !frames.empty()
                    ? "<details><summary>" + countText(frames.size()) + " frames</summary>" +
                          stackHtml(frames) + "</details>"
                    : muted(kDash));
    out += "</tr>";
  }
  return out + "</tbody></table></div>";
}

// Python's holders name what keeps a finding's tensors alive ("list `losses` (global of
// train.py)"); the ones without a valid finding index are shown on their own.
std::string holderHtml(const ReadJson& holder) {
  std::string out = "<li>" + richText(textAt(holder, "description"));
  std::vector<std::string> details;
  std::string kind = textAt(holder, "kind");
  if (!kind.empty()) details.push_back(escapeHtml(kind));
  if (std::optional<double> tensors = numberAt(holder, "tensors"); tensors && *tensors > 1) {
    details.push_back("holds " + countText(*tensors) + " of the tensors sampled");
  }
  if (flagAt(holder, "via_graph").value_or(false)) details.push_back("through an autograd graph");
  if (!details.empty()) {
    std::string joined;
    for (const std::string& detail : details) joined += (joined.empty() ? "" : ", ") + detail;
    out += " " + muted("(" + joined + ")");
  }
  return out + "</li>";
}

// What a cause held before it was freed together (a phase's end, a reset): when, how often, and
// the most it held.
std::string freedHtml(const ReadJson& freed) {
  if (!freed.is_object()) return "";
  double times = numberOr(freed, "times", 1);
  std::string phase = textAt(freed, "phase");
  std::string where = phase.empty() ? "" : " of phase <code>" + escapeHtml(phase) + "</code>";
  std::string text;
  if (times <= 1) {
    text = "Held over steps " + countText(numberAt(freed, "first_step")) + "&ndash;" +
           countText(numberAt(freed, "last_step")) + where + ", then freed together in step " +
           countText(numberAt(freed, "freed_at_step")) + ".";
  } else {
    text = "Built up and freed together " + countText(times) + " times, every ~" +
           countText(std::round(numberOr(freed, "steps_per_time", 0))) + " steps (steps " +
           countText(numberAt(freed, "first_step")) + "&ndash;" +
           countText(numberAt(freed, "last_step")) + where + ").";
  }
  text += " At most <b>" + bytesText(numberAt(freed, "peak_bytes")) + "</b>" +
          (times > 1 ? " each time" : "") + ".";
  if (flagAt(freed, "building_up").value_or(false)) text += " Building up again now.";
  return "<div class=\"hint freed\"><h4>Held, then freed</h4><p>" + text +
         " Freed when a phase or the function holding it ended, or when it was reset; until "
         "then it grows with every step, so a longer phase runs out of memory.</p></div>";
}

// The phases of the steps (training, validation, ...; loops memseal run found), when more than one.
std::string phasesHtml(const ReadJson& check) {
  const ReadJson& phases = arrayAt(check, "phases");
  if (phases.size() < 2) return "";
  std::string out =
      "<div class=\"card phases\"><h3>Phases</h3><div class=\"table-wrap\"><table><thead><tr>"
      "<th>phase</th><th class=\"num\">first step</th><th class=\"num\">steps</th>"
      "<th class=\"num\">runs</th><th>backward</th></tr></thead><tbody>";
  for (const ReadJson& phase : phases) {
    if (!phase.is_object()) continue;
    std::string name = textAt(phase, "name");
    out += "<tr>" + cell(name.empty() ? muted("(unnamed)") : escapeHtml(name)) +
           numCell(countText(numberAt(phase, "first_step"))) +
           numCell(countText(numberAt(phase, "steps"))) +
           numCell(countText(numberAt(phase, "runs"))) +
           cell(flagAt(phase, "backward_ran").value_or(false) ? "ran" : muted("none")) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

// Where the steps came from, when memseal took them (`memseal run`): one line per source.
std::string stepsFromHtml(const ReadJson& check) {
  std::vector<std::string> lines = stringsAt(check, "steps_from");
  if (lines.empty()) return "";
  std::string out = "<div class=\"card steps-from\"><h3>Steps</h3><ul>";
  for (const std::string& line : lines) out += "<li>" + richText(line) + "</li>";
  return out + "</ul></div>";
}

std::string findingCard(const ReadJson& finding, int index, const ReadJson& holders) {
  std::string category = textAt(finding, "category");
  std::string retained = textAt(finding, "retained");
  std::string out = "<article class=\"finding-card card\" id=\"finding-" + std::to_string(index) +
                    "\"><header><span class=\"index " + findingColour(index) + "\">" +
                    std::to_string(index) + "</span><h3>" +
                    (category.empty() ? muted("finding") : escapeHtml(category)) + "</h3>";
  if (!retained.empty()) out += "<span class=\"pill\">" + escapeHtml(retained) + "</span>";
  out += "</header>" + growthTiles(finding);
  if (category != "untracked-growth") {
    out += "<dl class=\"facts\"><dt>made by</dt><dd>" + opHtml(finding) + "</dd>";
    out += "<dt>scope</dt><dd>" + scopeHtml(finding) + "</dd>";
    out += "<dt>tensor</dt><dd>" +
           tensorHtml(member(finding, "tensor"), member(finding, "shapes")) + "</dd>";
    out += "<dt>stack</dt><dd>" + stackHtml(member(finding, "frames")) + "</dd></dl>";
    out += partsHtml(member(finding, "parts"));
  }
  std::string holder_items;
  for (const ReadJson& holder : holders) {
    if (numberOr(holder, "finding", -1) == index - 1) holder_items += holderHtml(holder);
  }
  if (!holder_items.empty()) {
    out +=
        "<div class=\"holders\"><h4>What holds it (Python)</h4><ul>" + holder_items + "</ul></div>";
  }
  out += freedHtml(member(finding, "freed"));
  return out + hintHtml("Cause and fix", textAt(finding, "hint")) + "</article>";
}

// Findings keep their sites (and a cause's parts theirs); ranked by what is retained at the end,
// this is the check report's answer to "where is the memory".
std::string topSitesHtml(const ReadJson& findings) {
  struct Row {
    std::string label;
    int finding;
    const ReadJson* site;
    double survivor_bytes;
  };
  std::vector<Row> rows;
  for (std::size_t i = 0; i < findings.size(); ++i) {
    const ReadJson& finding = findings[i];
    if (!finding.is_object() || textAt(finding, "category") == "untracked-growth") continue;
    int index = static_cast<int>(i) + 1;
    const ReadJson& parts = arrayAt(finding, "parts");
    if (parts.size() > 1) {
      for (std::size_t p = 0; p < parts.size(); ++p) {
        if (!parts[p].is_object()) continue;
        rows.push_back({std::to_string(index) + "." + std::to_string(p + 1), index, &parts[p],
                        numberOr(parts[p], "survivor_bytes", 0)});
      }
    } else {
      rows.push_back(
          {std::to_string(index), index, &finding, numberOr(finding, "survivor_bytes", 0)});
    }
  }
  if (rows.empty()) return "";
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.survivor_bytes > b.survivor_bytes; });
  std::string out =
      "<div class=\"card\"><h3>Top sites by retained bytes</h3><div class=\"table-wrap\">"
      "<table class=\"top-sites\"><thead><tr><th>finding</th><th>made by</th><th>scope</th>"
      "<th>where</th><th class=\"num\">survivors</th><th class=\"num\">retained</th>"
      "<th class=\"num\">per step</th></tr></thead><tbody>";
  for (const Row& row : rows) {
    const ReadJson& site = *row.site;
    double rate = numberOr(site, "bytes_per_step", 0);
    out += "<tr><td><a href=\"#finding-" + std::to_string(row.finding) + "\">" + row.label +
           "</a></td>" + cell(opHtml(site)) + cell(scopeHtml(site)) +
           cell(firstUserFrameHtml(site)) + numCell(countText(numberAt(site, "survivors"))) +
           numCell(orDash(row.survivor_bytes, bytesText(row.survivor_bytes))) +
           numCell(orDash(rate, "+" + bytesText(rate))) + "</tr>";
  }
  return out + "</tbody></table></div></div>";
}

std::string cycleGarbageHtml(const ReadJson& garbage) {
  if (!garbage.is_object()) return "";
  double tensors = numberOr(garbage, "tensors", 0);
  std::string out = "<h4>Garbage in reference cycles</h4>";
  if (!(tensors > 0))
    return out + "<p>" + muted("none: no tensor waits for the collector") + "</p>";
  out += "<p>" + countText(tensors) + " " + plural(tensors, "tensor", "tensors") + " (" +
         bytesText(numberOr(garbage, "bytes", 0)) +
         ") kept alive only by reference cycles: <code>gc.collect()</code> frees them, reference "
         "counting never does.</p>";
  std::string types;
  for (const ReadJson& type : arrayAt(garbage, "types")) {
    if (!type.is_object()) continue;
    types += "<tr>" + cell(codeText(textAt(type, "type"))) +
             numCell(countText(numberOr(type, "objects", 0))) + "</tr>";
  }
  if (!types.empty()) {
    out +=
        "<table class=\"compact\"><thead><tr><th>on the cycles</th><th class=\"num\">objects"
        "</th></tr></thead><tbody>" +
        types + "</tbody></table>";
  }
  std::vector<std::string> explained = stringsAt(garbage, "findings");
  if (!explained.empty()) {
    std::string joined;
    for (const std::string& category : explained) {
      joined += (joined.empty() ? "" : ", ") + codeText(category);
    }
    out += "<p>Not a leak: what looked like " + joined +
           " is this garbage, waiting for the collector.</p>";
  }
  return out;
}

std::string pythonHtml(const ReadJson& python, std::size_t finding_count) {
  if (!python.is_object()) return "";
  std::string out = "<div class=\"card python\"><h3>Python</h3>";
  std::string holders;
  for (const ReadJson& holder : arrayAt(python, "holders")) {
    if (!holder.is_object()) continue;
    double finding = numberOr(holder, "finding", -1);
    std::string prefix = "";
    if (finding >= 0 && finding < static_cast<double>(finding_count)) {
      int index = static_cast<int>(finding) + 1;
      prefix =
          "<a href=\"#finding-" + std::to_string(index) + "\">[" + std::to_string(index) + "]</a> ";
    }
    std::string item = holderHtml(holder);
    holders += "<li>" + prefix + item.substr(4);  // after holderHtml's own "<li>"
  }
  if (!holders.empty()) out += "<h4>What holds the findings</h4><ul>" + holders + "</ul>";
  out += cycleGarbageHtml(member(python, "cycle_garbage"));
  return out + "</div>";
}

}  // namespace

std::string checkSection(const ReadJson& check) {
  std::vector<StepSample> samples = stepSamples(check);
  const ReadJson& findings = arrayAt(check, "findings");
  const ReadJson& python = member(check, "python");
  std::string out = "<section id=\"check\"><h2>Leak check</h2>";
  out += verdictHtml(check, samples);
  out += timelineCard(check, samples);
  out += phasesHtml(check);
  out += stepsFromHtml(check);
  const ReadJson& holders = arrayAt(python, "holders");
  int index = 0;
  for (const ReadJson& finding : findings) {
    ++index;
    out += findingCard(finding.is_object() ? finding : nullJson(), index, holders);
  }
  out += topSitesHtml(findings);
  out += deviceMemoryHtml(check);
  out += pythonHtml(python, findings.size());
  out += notesHtml(stringsAt(check, "notes"));
  return out + "</section>";
}

}  // namespace memseal::report::html
