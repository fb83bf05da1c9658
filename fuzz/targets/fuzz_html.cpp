// Any JSON as each document of the HTML page (check, explain, fit, merged, diff) and as the whole
// page: the page renders whatever it is given (fields of the wrong type read as absent) and never
// lets the input's text out unescaped.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "report/html_report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nlohmann::json document =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return 0;
  const std::string marker = "<fuzz-unescaped>";
  for (const char* key : {"check", "explain", "fit", "merged", "diff"}) {
    nlohmann::json page = {{key, document}};
    std::string html = memseal::report::renderHtmlReport(page, marker);
    if (html.find(marker) != std::string::npos) std::abort();  // the title, unescaped
    memseal::report::renderHtmlFragment(page, "fuzz");
  }
  memseal::report::renderHtmlReport(document, "fuzz");
  return 0;
}
