// The public HTML entry points: the reports as their JSON documents, rendered by report/html/.
#include <nlohmann/json.hpp>

#include <stdexcept>

#include "common/text.h"
#include "memseal/html.h"
#include "report/html_report.h"

namespace memseal {

namespace {

nlohmann::json pageDocument(const HtmlPage& page) {
  nlohmann::json document = nlohmann::json::object();
  if (!page.check_json.empty()) {
    document["check"] = nlohmann::json::parse(page.check_json);
  } else if (page.check != nullptr) {
    document["check"] = nlohmann::json::parse(page.check->toJson());
  }
  if (page.explain != nullptr) document["explain"] = nlohmann::json::parse(page.explain->toJson());
  if (page.fit != nullptr) document["fit"] = nlohmann::json::parse(page.fit->toJson());
  if (page.merged != nullptr) {
    nlohmann::json merged = nlohmann::json::parse(page.merged->toJson());
    for (nlohmann::json& rank : merged["ranks"]) {
      auto found = page.rank_pages.find(rank.value("rank", -1));
      if (found != page.rank_pages.end()) rank["page"] = found->second;
    }
    document["merged"] = std::move(merged);
  }
  if (page.diff != nullptr) document["diff"] = nlohmann::json::parse(page.diff->toJson());
  return document;
}

}  // namespace

std::string renderHtml(const HtmlPage& page) {
  if (page.live == nullptr) return report::renderHtmlReport(pageDocument(page), page.title);
  report::LiveBanner banner{page.live->version, page.live->ended, page.live->status};
  return report::renderHtmlReport(pageDocument(page), page.title, &banner);
}

std::string renderHtmlFragment(const HtmlPage& page) {
  return report::renderHtmlFragment(pageDocument(page), page.title);
}

void writeReportFile(const std::string& path, const std::string& content) {
  std::string error;
  if (!common::writeFileAtomically(path, content, &error)) throw std::runtime_error(error);
}

void writeHtml(const HtmlPage& page, const std::string& path) {
  writeReportFile(path, renderHtml(page));
}

}  // namespace memseal
