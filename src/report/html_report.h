// One self-contained HTML page for what memseal found and measured: nothing is loaded from
// elsewhere (no network), charts are inline SVG, the little JavaScript it has is inline, and every
// string that came from the traced program (paths, op names, frames, scope names) is escaped. Its
// Content-Security-Policy lets nothing load and no script run but the page's own, as a second
// line of defence behind the escaping.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace memseal::report {

// `page` holds any of these documents, each optional:
//   "check":   a memseal.check/1 report (docs/check-json.md): verdict, timeline of tracked bytes
//              and resident memory per step (warm-up shaded, each finding's growth marked), one
//              card per finding, the top sites.
//   "explain": a memseal.explain/1 document (docs/explain-json.md): the peak breakdown by role,
//              module and site, and the live bytes over the peak step.
//   "fit":     a memseal.fit/2 (or /1) document (docs/explain-json.md): peak against size, the
//   fitted
//              model, the prediction for the budget and its verification.
// Missing fields, and fields of the wrong type, read as absent: the page still renders. `title`
// names the page (the case or script); it is escaped too.
// The line at the top of a page that `memseal run --live` serves (memseal::LivePageState).
struct LiveBanner {
  std::uint64_t version = 0;
  bool ended = false;
  std::string status;
};

// `live`: the page `memseal run --live` serves (its banner, and a script that may fetch the page's
// next version from the server it came from), or null.
std::string renderHtmlReport(const nlohmann::json& page, const std::string& title,
                             const LiveBanner* live = nullptr);

// The same cards without a page around them, for a notebook's output cell (Jupyter's
// _repr_html_): a <div> whose <style> applies only inside it, and no script.
std::string renderHtmlFragment(const nlohmann::json& page, const std::string& title);

// `css` with every rule applying only inside `scope` (a selector): :root, html and body become the
// scope itself, other selectors are put under it, @media blocks are scoped inside.
std::string scopeCss(const std::string& css, const std::string& scope);

// Text made safe for HTML element content and attribute values (& < > " ').
std::string escapeHtml(const std::string& text);

}  // namespace memseal::report
