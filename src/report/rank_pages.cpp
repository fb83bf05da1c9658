// Links from a distributed job's merged page to each rank's own page (memseal/html.h), for every
// front end that writes one: memseal run's job folder, memseal merge, the Python module.
#include "memseal/html.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <sstream>
#include <vector>

#include "common/text.h"

namespace memseal {

namespace {

// The path's components after normalPath, absolute (from the working directory where relative).
std::vector<std::string> absoluteComponents(const std::string& path) {
  std::string absolute = path;
  if (absolute.empty() || absolute[0] != '/') {
    char here[4096];
    if (::getcwd(here, sizeof(here)) == nullptr) return {};
    absolute = std::string(here) + "/" + absolute;
  }
  std::vector<std::string> components;
  std::stringstream parts(common::normalPath(absolute));
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (!part.empty()) components.push_back(part);
  }
  return components;
}

// What a URL's path cannot hold as it is, percent-encoded.
std::string urlPath(const std::string& path) {
  std::string link;
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      link += static_cast<char>(c);
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof(escaped), "%%%02X", c);
      link += escaped;
    }
  }
  return link;
}

}  // namespace

// Worked out on the paths' text, without std::filesystem: libtorch's library carries a copy of
// some of its functions, which the dynamic linker may bind in its place.
std::map<int, std::string> rankPagesBesideReports(const MergedReport& merged) {
  std::map<int, std::string> pages;
  for (const RankSummary& rank : merged.ranks) {
    const std::string& source = rank.source;
    if (source.size() <= 5 || source.compare(source.size() - 5, 5, ".json") != 0) continue;
    std::string page = source.substr(0, source.size() - 5) + ".html";
    struct stat status {};
    if (::stat(page.c_str(), &status) == 0 && S_ISREG(status.st_mode)) {
      pages.emplace(rank.identity.rank, page);
    }
  }
  return pages;
}

std::map<int, std::string> pageLinksFrom(const std::string& html_path,
                                         const std::map<int, std::string>& pages) {
  std::vector<std::string> folder = absoluteComponents(html_path);
  if (folder.empty()) return {};
  folder.pop_back();  // the page's own name
  std::map<int, std::string> links;
  for (const auto& [rank, page] : pages) {
    std::vector<std::string> target = absoluteComponents(page);
    if (target.empty()) continue;
    std::size_t common = 0;
    while (common < folder.size() && common + 1 < target.size() &&
           folder[common] == target[common]) {
      ++common;
    }
    std::string relative;
    for (std::size_t i = common; i < folder.size(); ++i) relative += "../";
    for (std::size_t i = common; i < target.size(); ++i) {
      relative += target[i] + (i + 1 < target.size() ? "/" : "");
    }
    links[rank] = urlPath(relative);
  }
  return links;
}

}  // namespace memseal
