// The HTML report: each document given gets its section and no other, every string from a
// document or the title is escaped wherever it lands, and missing or mistyped fields never break
// the page. With MEMSEAL_HTML_SAMPLES_DIR set, HtmlReportSamples writes sample pages (and their
// JSON) there for tests/report/html_browser_check.py to open in a browser.
#include "report/html_report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

namespace memseal::report {
namespace {

using Json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;
const char* const kInjection = "<script>alert(1)</script>";

std::size_t occurrences(const std::string& text, const std::string& piece) {
  std::size_t count = 0;
  for (std::size_t at = text.find(piece); at != std::string::npos;
       at = text.find(piece, at + piece.size())) {
    ++count;
  }
  return count;
}

Json frame(const std::string& function, const std::string& file, int line,
           const std::string& library, bool internal) {
  return {{"function", function},
          {"file", file},
          {"line", line},
          {"library", library},
          {"internal", internal}};
}

const char* const kTorchLib = "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so";

Json perStep(int steps, int warmup) {
  Json per_step = Json::array();
  for (int step = 0; step < steps; ++step) {
    // Warm-up climbs to the steady level, reached at its last boundary; after it, tracked bytes
    // grow 4 KiB and resident memory about 52 KiB per step.
    int after = step - (warmup - 1);
    double ramp = static_cast<double>(step) / (warmup - 1);
    double live = after <= 0 ? 1.5 * kMiB * (0.35 + 0.65 * ramp) : 1.5 * kMiB + 4096.0 * after;
    double resident = after <= 0 ? kMiB * (150 + 48 * ramp)
                                 : 198 * kMiB + 53248.0 * after + ((step * 7) % 5) * 12288.0;
    per_step.push_back({{"step", step},
                        {"live_bytes", static_cast<std::int64_t>(live)},
                        {"live_count", 340 + std::max(after, 0)},
                        {"resident_bytes", static_cast<std::int64_t>(resident)},
                        {"graph_nodes_alive", 6 * std::max(after, 0)}});
  }
  return per_step;
}

// A leak as `memseal check` reports one: a graph kept alive by `total_loss += loss`, and a list
// keeping one tensor per step, whose op, scope, frame and hint carry markup to escape.
Json leakCheck() {
  Json graph_frames = Json::array(
      {frame("at::native::mse_loss(at::Tensor const&, at::Tensor const&, long)", "", 0, kTorchLib,
             true),
       frame("at::_ops::mse_loss::call(at::Tensor const&, at::Tensor const&, long)", "", 0,
             kTorchLib, true),
       frame("trainStep(Model&, torch::optim::SGD&, Batch const&)", "/home/ana/leaky/train.cpp", 42,
             "/home/ana/leaky/build/leaky_training", false),
       frame("main", "/home/ana/leaky/train.cpp", 88, "/home/ana/leaky/build/leaky_training",
             false),
       frame("__libc_start_call_main", "", 0, "/lib/x86_64-linux-gnu/libc.so.6", true)});
  Json graph_part = {{"retained", "autograd graph nodes"},
                     {"bytes_per_step", 0},
                     {"count_per_step", 1},
                     {"survivors", 25},
                     {"survivor_bytes", 0},
                     {"steps_with_survivors", 25},
                     {"steps_observed", 25},
                     {"op", "aten::mse_loss"},
                     {"outer_op", "aten::mse_loss"},
                     {"scope", "train/loss"},
                     {"frames", graph_frames},
                     {"tensor",
                      {{"shape", Json::array()},
                       {"dtype", "Float"},
                       {"requires_grad", true},
                       {"is_leaf", false},
                       {"grad_fn", "MseLossBackward0"}}},
                     {"shapes", nullptr}};
  Json add_part = graph_part;
  add_part["op"] = "aten::add_";
  add_part["outer_op"] = "aten::add_";
  add_part["tensor"]["grad_fn"] = "AddBackward0";
  Json graph_finding = graph_part;
  graph_finding["category"] = "autograd-graph-retained";
  graph_finding["bytes_per_step"] = 53248;
  graph_finding["parts"] = Json::array({graph_part, add_part});
  graph_finding["hint"] =
      "each step's loss is summed with `total_loss += loss`, which keeps every step's autograd "
      "graph alive; accumulate `loss.item()` (or `loss.detach()`) instead";

  Json list_finding = {
      {"category", "tensors-retained"},
      {"retained", "tensor storage"},
      {"bytes_per_step", 4096},
      {"count_per_step", 1},
      {"survivors", 25},
      {"survivor_bytes", 102400},
      {"steps_with_survivors", 25},
      {"steps_observed", 25},
      {"op", std::string("aten::") + kInjection},
      {"outer_op", "aten::linear"},
      {"scope", std::string("train/") + kInjection},
      {"frames", Json::array({frame("at::native::addmm_out_cpu", "", 0, kTorchLib, true),
                              frame(std::string("keepHistory") + kInjection,
                                    std::string("/home/ana/leaky/") + kInjection + ".cpp", 17,
                                    "/home/ana/leaky/build/leaky_training", false),
                              frame("main", "/home/ana/leaky/train.cpp", 91,
                                    "/home/ana/leaky/build/leaky_training", false)})},
      {"tensor",
       {{"shape", {32, 32}},
        {"dtype", std::string("Float") + kInjection},
        {"requires_grad", false},
        {"is_leaf", true},
        {"grad_fn", nullptr}}},
      {"shapes", nullptr},
      {"parts", Json::array()},
      {"hint", std::string("a container keeps one tensor per step: ") + kInjection +
                   " clear it, or keep `t.detach().clone()` of what you need"}};

  return {
      {"schema", "memseal.check/1"},
      {"verdict", "leak"},
      {"steps", 30},
      {"warmup", 5},
      {"detected_at_step", 9},
      {"backward_ran", true},
      {"notes", Json::array({std::string("ops were sampled: ") + kInjection})},
      {"steps_from", Json::array({std::string("one step per call of SGD.step() (") + kInjection +
                                  "), seen through PyTorch's hooks (30 steps)"})},
      {"findings", Json::array({graph_finding, list_finding})},
      {"live_bytes", Json::array()},
      {"per_step", perStep(30, 5)},
      {"python",
       {{"holders", Json::array({{{"finding", 0},
                                  {"description", "float `total_loss` (global of train.py)"},
                                  {"kind", "global"},
                                  {"tensors", 1},
                                  {"via_graph", true}},
                                 {{"finding", 1},
                                  {"description", "list `history` (local of train_step)"},
                                  {"kind", "local"},
                                  {"tensors", 25},
                                  {"via_graph", false}}})},
        {"cycle_garbage",
         {{"tensors", 0}, {"bytes", 0}, {"types", Json::array()}, {"findings", Json::array()}}}}}};
}

Json noLeakCheck() {
  Json per_step = Json::array();
  for (int step = 0; step < 40; ++step) {
    double live = 6 * kMiB + (step < 4 ? -kMiB * (4 - step) : 4096.0 * (step % 4));
    per_step.push_back(
        {{"step", step},
         {"live_bytes", static_cast<std::int64_t>(live)},
         {"live_count", 410},
         {"resident_bytes", static_cast<std::int64_t>((step < 4 ? 180 + 7.5 * step : 210) * kMiB +
                                                      ((step * 13) % 7) * 8192.0)},
         {"graph_nodes_alive", 0}});
  }
  return {{"schema", "memseal.check/1"},
          {"verdict", "no_leak"},
          {"steps", 40},
          {"warmup", 5},
          {"detected_at_step", nullptr},
          {"backward_ran", true},
          {"notes", Json::array()},
          {"findings", Json::array()},
          {"live_bytes", Json::array()},
          {"per_step", per_step}};
}

Json explainDocument() {
  auto role = [](const char* name, double mib, int count) {
    return Json{{"role", name}, {"bytes", static_cast<std::int64_t>(mib * kMiB)}, {"count", count}};
  };
  double baseline = (4 + 4 + 8 + 0.1) * kMiB;
  double peak = baseline + 13 * kMiB;
  Json timeline = Json::array();
  for (int event = 0; event <= 240; event += 2) {
    double live = event <= 150 ? baseline + 12 * kMiB * event / 150.0 + (event % 6) * 40000.0
                               : baseline + 12 * kMiB * (240 - event) / 90.0;
    if (event == 150) live = peak;
    timeline.push_back({{"event", event}, {"live_bytes", static_cast<std::int64_t>(live)}});
  }
  Json linear_frames = Json::array(
      {frame("at::native::addmm_out_cpu", "", 0, kTorchLib, true),
       frame("torch::nn::LinearImpl::forward(at::Tensor const&)", "", 0, kTorchLib, true),
       frame("Net::forward(at::Tensor)", "/home/ana/model/net.cpp", 31,
             "/home/ana/model/build/train", false),
       frame("main", "/home/ana/model/train.cpp", 54, "/home/ana/model/build/train", false)});
  auto site = [&](const char* op, const char* outer, const char* scope, const char* role_name,
                  double mib, int count, Json shape, const char* grad_fn) {
    return Json{{"op", op},
                {"outer_op", outer},
                {"scope", scope},
                {"frames", linear_frames},
                {"role", role_name},
                {"bytes", static_cast<std::int64_t>(mib * kMiB)},
                {"count", count},
                {"tensor",
                 {{"shape", shape},
                  {"dtype", "Float"},
                  {"requires_grad", grad_fn != nullptr},
                  {"is_leaf", grad_fn == nullptr},
                  {"grad_fn", grad_fn ? Json(grad_fn) : Json(nullptr)}}}};
  };
  Json step_peaks = Json::array();
  for (int step = 3; step < 8; ++step) {
    double step_peak = step == 6 ? peak : peak - (7 - step % 3) * 65536.0;
    step_peaks.push_back({{"step", step},
                          {"peak_bytes", static_cast<std::int64_t>(step_peak)},
                          {"baseline_bytes", static_cast<std::int64_t>(baseline)},
                          {"end_bytes", static_cast<std::int64_t>(baseline)}});
  }
  return {
      {"schema", "memseal.explain/1"},
      {"steps", 8},
      {"warmup", 3},
      {"peak_step", 6},
      {"peak_bytes", static_cast<std::int64_t>(peak)},
      {"baseline_bytes", static_cast<std::int64_t>(baseline)},
      {"end_bytes", static_cast<std::int64_t>(baseline)},
      {"peak_live_count", 214},
      {"events_in_step", 241},
      {"peak_event", 150},
      {"roles", Json::array({role("parameters", 4, 8), role("gradients", 4, 8),
                             role("optimizer_state", 8, 16), role("activations", 12, 36),
                             role("temporaries", 1, 4), role("other", 0.1, 2)})},
      {"modules",
       Json::array(
           {{{"module", "encoder.0"},
             {"bytes", static_cast<std::int64_t>(14 * kMiB)},
             {"count", 40},
             {"roles",
              {{"parameters", 2 * kMiB},
               {"gradients", 2 * kMiB},
               {"optimizer_state", 4 * kMiB},
               {"activations", 6 * kMiB}}}},
            {{"module", "encoder.1"},
             {"bytes", static_cast<std::int64_t>(12 * kMiB)},
             {"count", 28},
             {"roles",
              {{"parameters", 2 * kMiB},
               {"gradients", 2 * kMiB},
               {"optimizer_state", 4 * kMiB},
               {"activations", 4 * kMiB}}}},
            {{"module", ""},
             {"bytes", static_cast<std::int64_t>(3.1 * kMiB)},
             {"count", 6},
             {"roles",
              {{"activations", 2 * kMiB}, {"temporaries", kMiB}, {"other", 0.1 * kMiB}}}}})},
      {"sites", Json::array({site("aten::addmm", "aten::linear", "encoder.0", "activations", 6, 12,
                                  {64, 1024}, "AddmmBackward0"),
                             site("aten::zeros_like", "aten::zeros_like", "optimizer",
                                  "optimizer_state", 8, 16, {1024, 1024}, nullptr),
                             site("aten::relu", "aten::relu", "encoder.1", "activations", 4, 12,
                                  {64, 1024}, "ReluBackward0")})},
      {"tensors", Json::array({{{"bytes", static_cast<std::int64_t>(4 * kMiB)},
                                {"role", "optimizer_state"},
                                {"op", "aten::zeros_like"},
                                {"scope", "optimizer"},
                                {"step", 3},
                                {"tensor", {{"shape", {1024, 1024}}, {"dtype", "Float"}}}},
                               {{"bytes", static_cast<std::int64_t>(kMiB)},
                                {"role", "activations"},
                                {"op", "aten::addmm"},
                                {"scope", "encoder.0"},
                                {"step", 6},
                                {"tensor",
                                 {{"shape", {256, 1024}},
                                  {"dtype", "Float"},
                                  {"requires_grad", true},
                                  {"is_leaf", false},
                                  {"grad_fn", "AddmmBackward0"}}}}})},
      {"timeline", timeline},
      {"step_peaks", step_peaks},
      {"identified", {{"model", true}, {"optimizer", true}}},
      {"notes", Json::array({"module paths come from `MEMSEAL_REGION` names"})},
      {"remedies", Json::array({{{"kind", "checkpoint-module"},
                                 {"target", "Net/encoder"},
                                 {"bytes", static_cast<std::int64_t>(4 * kMiB)},
                                 {"upper_bound", false},
                                 {"change", "wrap Net/encoder's forward in torch.utils.checkpoint"},
                                 {"cost", "its forward runs again in backward"}},
                                {{"kind", "lower-precision-activations"},
                                 {"target", ""},
                                 {"bytes", static_cast<std::int64_t>(2 * kMiB)},
                                 {"upper_bound", true},
                                 {"change", "run the forward under `torch.autocast`"},
                                 {"cost", "precision"}}})}};
}

Json fitDocument() {
  double intercept = 20 * kMiB;
  double slope = 1.5 * kMiB;
  Json points = Json::array();
  for (int size : {8, 16, 32, 64}) {
    points.push_back({{"size", size},
                      {"peak_bytes", static_cast<std::int64_t>(intercept + slope * size +
                                                               (size % 3) * 20000.0)}});
  }
  return {
      {"schema", "memseal.fit/1"},
      {"points", points},
      {"model", "linear"},
      {"is_linear", true},
      {"linear", {{"intercept", intercept}, {"slope", slope}, {"max_relative_residual", 0.0041}}},
      {"quadratic", nullptr},
      {"tolerance", 0.05},
      {"budget_bytes", static_cast<std::int64_t>(512 * kMiB)},
      {"budget_source", "--budget"},
      {"margin", 0.1},
      {"predicted_max_size", 293},
      {"predicted_peak_bytes", static_cast<std::int64_t>(intercept + slope * 293)},
      {"refusal", nullptr},
      {"verify",
       {{"size", 293},
        {"predicted_peak_bytes", static_cast<std::int64_t>(intercept + slope * 293)},
        {"measured_peak_bytes", static_cast<std::int64_t>(452 * kMiB)},
        {"relative_error", -0.0163},
        {"within_budget", true}}}};
}

// Pieces of markup that only injected text could have made.
void expectNothingInjected(const std::string& html) {
  EXPECT_EQ(occurrences(html, "<script>alert"), 0u);
  EXPECT_EQ(occurrences(html, "<script"), 1u) << "only the page's own script";
  EXPECT_EQ(occurrences(html, "<img"), 0u);
  EXPECT_EQ(occurrences(html, " onerror="), 0u);
}

TEST(EscapeHtml, EscapesAllFiveCharacters) {
  EXPECT_EQ(escapeHtml("a & b < c > d \" e ' f"), "a &amp; b &lt; c &gt; d &quot; e &#39; f");
  EXPECT_EQ(escapeHtml(""), "");
  EXPECT_EQ(escapeHtml("&amp;"), "&amp;amp;");  // escaped once more, never taken as markup
  EXPECT_EQ(escapeHtml("plain aten::mul"), "plain aten::mul");
}

TEST(HtmlReport, DocumentStringsAreEscapedEverywhere) {
  Json check = leakCheck();
  Json explain = explainDocument();
  explain["modules"][0]["module"] = kInjection;
  explain["sites"][0]["op"] = kInjection;
  explain["notes"] = Json::array({kInjection});
  Json fit = fitDocument();
  fit["budget_source"] = kInjection;
  fit["model"] = kInjection;
  std::string html = renderHtmlReport({{"check", check}, {"explain", explain}, {"fit", fit}},
                                      std::string("case ") + kInjection + " \"quoted\" 'single'");
  expectNothingInjected(html);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("<title>case &lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot; "
                      "&#39;single&#39; &#183; memseal</title>"),
            std::string::npos);
  // The op name lands in a card, in the top-sites table and in the chart's tooltip text.
  EXPECT_GE(occurrences(html, "aten::&lt;script&gt;alert(1)"), 2u);
}

// A memseal.diff/1 document whose keys and labels came from the programs (module names, files).
Json diffDocument() {
  Json timeline_before = Json::array(), timeline_after = Json::array();
  for (int i = 0; i <= 10; ++i) {
    timeline_before.push_back({{"x", i * 10}, {"bytes", (1 + i % 3) * kMiB}});
    timeline_after.push_back({{"x", i * 10}, {"bytes", (2 + i % 3) * kMiB}});
  }
  return {
      {"schema", "memseal.diff/1"},
      {"kind", "explain"},
      {"empty", false},
      {"peak_measure", "live tracked tensor bytes at the peak of the step"},
      {"peak_change", 3 * kMiB},
      {"noise_bytes", 0},
      {"before",
       {{"label", "before.json"}, {"peak_bytes", 3 * kMiB}, {"timeline", timeline_before}}},
      {"after", {{"label", kInjection}, {"peak_bytes", 6 * kMiB}, {"timeline", timeline_after}}},
      {"timeline_axis", "share of the step"},
      {"breakdowns", Json::array({{{"dimension", "module"},
                                   {"additive", true},
                                   {"entries", Json::array({{{"key", kInjection},
                                                             {"before", kMiB},
                                                             {"after", 4 * kMiB},
                                                             {"change", 3 * kMiB}}})}}})},
      {"causes", Json::array({{{"change", "new"},
                               {"category", "tensors-retained"},
                               {"op", "aten::mm"},
                               {"site", kInjection},
                               {"before_bytes_per_step", 0},
                               {"after_bytes_per_step", 4096},
                               {"holder", "list `losses`"}}})},
      {"capacity", nullptr},
      {"warnings", Json::array({kInjection})}};
}

TEST(HtmlReport, TwoRunsComparedShowBothLinesTheSplitsAndTheCauses) {
  std::string html = renderHtmlReport({{"diff", diffDocument()}}, "two runs");
  expectNothingInjected(html);
  EXPECT_NE(html.find("id=\"diff-timeline-chart\""), std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"before-line\""), 1u);
  EXPECT_NE(html.find("<h3>By module</h3>"), std::string::npos);
  EXPECT_NE(html.find("<h3>Leak causes</h3>"), std::string::npos);
  EXPECT_NE(html.find("kept by list `losses`"), std::string::npos);
  EXPECT_NE(html.find("+3.0 MiB"), std::string::npos);
  EXPECT_GE(occurrences(html, "&lt;script&gt;alert(1)&lt;/script&gt;"), 4u);
  Json same = diffDocument();
  same["empty"] = true;
  EXPECT_NE(renderHtmlReport({{"diff", same}}, "t").find("No change beyond the noise"),
            std::string::npos);
}

TEST(HtmlReport, InjectedAttributeQuotesStayInsideText) {
  Json check = leakCheck();
  check["findings"][1]["category"] = "x\" onmouseover=\"alert(1)";
  check["findings"][1]["frames"][1]["library"] = "lib'><svg onload=alert(1)>";
  std::string html = renderHtmlReport({{"check", check}}, "t");
  EXPECT_EQ(occurrences(html, "\" onmouseover=\""), 0u);
  EXPECT_EQ(occurrences(html, "<svg onload"), 0u);
  EXPECT_NE(html.find("x&quot; onmouseover=&quot;alert(1)"), std::string::npos);
}

TEST(HtmlReport, LeakCheckHasVerdictTimelineAndOneCardPerFinding) {
  std::string html = renderHtmlReport({{"check", leakCheck()}}, "leaky");
  EXPECT_NE(html.find("id=\"verdict\" data-verdict=\"leak\""), std::string::npos);
  EXPECT_EQ(occurrences(html, "id=\"timeline-chart\""), 1u);
  EXPECT_EQ(occurrences(html, "class=\"finding-card"), 2u);
  EXPECT_EQ(occurrences(html, "class=\"top-sites\""), 1u);
  // One growth marker per finding, labelled with its index.
  EXPECT_EQ(occurrences(html, "data-finding=\"1\""), 1u);
  EXPECT_EQ(occurrences(html, "data-finding=\"2\""), 1u);
  EXPECT_NE(html.find("+4.0 KiB/step"), std::string::npos);
  EXPECT_NE(html.find("+52.0 KiB/step"), std::string::npos);
  EXPECT_NE(html.find("leak clear from step 9"), std::string::npos);
  EXPECT_NE(html.find("<details class=\"internal\">"), std::string::npos);
  EXPECT_NE(html.find("<code>total_loss += loss</code>"), std::string::npos);
  EXPECT_NE(html.find("list <code>history</code> (local of train_step)"), std::string::npos);
  // Where the steps came from, in a card of its own.
  EXPECT_EQ(occurrences(html, "class=\"card steps-from\""), 1u);
  EXPECT_NE(html.find("<li>one step per call of SGD.step()"), std::string::npos);
  EXPECT_EQ(html.find("id=\"roles-chart\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"fit-chart\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"peak-timeline-chart\""), std::string::npos);
}

TEST(HtmlReport, AFindingFreedByItsPhasesEndSaysWhenAndHowOften) {
  Json check = leakCheck();
  check["findings"][0]["freed"] = {{"first_step", 6},           {"last_step", 200},
                                   {"freed_at_step", 201},      {"times", 4},
                                   {"steps_per_time", 48.5},    {"peak_bytes", 3 << 20},
                                   {"phase", "loop 1 <train>"}, {"building_up", true}};
  check["phases"] = Json::array(
      {{{"name", "loop 1 <train>"},
        {"first_step", 0},
        {"steps", 190},
        {"runs", 4},
        {"backward_ran", true}},
       {{"name", ""}, {"first_step", 50}, {"steps", 20}, {"runs", 4}, {"backward_ran", false}}});
  std::string html = renderHtmlReport({{"check", check}}, "phases");
  EXPECT_EQ(occurrences(html, "class=\"hint freed\""), 1u);
  EXPECT_NE(html.find("Built up and freed together 4 times, every ~49 steps"), std::string::npos);
  EXPECT_NE(html.find("At most <b>3.0 MiB</b> each time"), std::string::npos);
  EXPECT_NE(html.find("Building up again now"), std::string::npos);
  // Phase names are the program's: escaped wherever they appear.
  EXPECT_EQ(html.find("<train>"), std::string::npos);
  EXPECT_EQ(occurrences(html, "loop 1 &lt;train&gt;"), 2u);
  EXPECT_EQ(occurrences(html, "class=\"card phases\""), 1u);
  EXPECT_NE(html.find("(unnamed)"), std::string::npos);
  // Without phases or anything freed, neither part is there.
  std::string plain = renderHtmlReport({{"check", leakCheck()}}, "plain");
  EXPECT_EQ(plain.find("class=\"hint freed\""), std::string::npos);
  EXPECT_EQ(plain.find("class=\"card phases\""), std::string::npos);
}

TEST(HtmlReport, NoLeakCheckHasGreenVerdictAndNoCards) {
  std::string html = renderHtmlReport({{"check", noLeakCheck()}}, "clean");
  EXPECT_NE(html.find("id=\"verdict\" data-verdict=\"no_leak\""), std::string::npos);
  EXPECT_NE(html.find("class=\"verdict no_leak\""), std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"finding-card"), 0u);
  EXPECT_EQ(occurrences(html, "class=\"top-sites\""), 0u);
  EXPECT_EQ(occurrences(html, "id=\"timeline-chart\""), 1u);
  EXPECT_EQ(html.find("leak clear from step"), std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"card steps-from\""), 0u);  // the program's own step()
}

TEST(HtmlReport, ExplainAndFitHaveOnlyTheirSections) {
  std::string explain = renderHtmlReport({{"explain", explainDocument()}}, "peak");
  EXPECT_NE(explain.find("id=\"roles-chart\""), std::string::npos);
  EXPECT_NE(explain.find("id=\"peak-timeline-chart\""), std::string::npos);
  EXPECT_NE(explain.find("class=\"modules\""), std::string::npos);
  EXPECT_NE(explain.find("class=\"sites\""), std::string::npos);
  EXPECT_NE(explain.find("class=\"tensors\""), std::string::npos);
  EXPECT_NE(explain.find("29.1 MiB"), std::string::npos);  // the peak
  EXPECT_NE(explain.find("41.2%"), std::string::npos);     // activations: 12 of 29.1 MiB
  EXPECT_EQ(explain.find("id=\"verdict\""), std::string::npos);
  EXPECT_EQ(explain.find("id=\"fit-chart\""), std::string::npos);

  std::string fit = renderHtmlReport({{"fit", fitDocument()}}, "fit");
  EXPECT_NE(fit.find("id=\"fit-chart\""), std::string::npos);
  EXPECT_NE(fit.find("class=\"budget-line\""), std::string::npos);
  EXPECT_NE(fit.find("class=\"usable-line\""), std::string::npos);
  EXPECT_NE(fit.find("class=\"model extrapolated\""), std::string::npos);
  EXPECT_NE(fit.find("class=\"verify\""), std::string::npos);
  EXPECT_NE(fit.find(">293<"), std::string::npos);
  EXPECT_EQ(fit.find("id=\"timeline-chart\""), std::string::npos);
  EXPECT_EQ(fit.find("id=\"roles-chart\""), std::string::npos);

  std::string all = renderHtmlReport(
      {{"check", leakCheck()}, {"explain", explainDocument()}, {"fit", fitDocument()}}, "all");
  for (const char* id :
       {"verdict", "timeline-chart", "roles-chart", "peak-timeline-chart", "fit-chart"}) {
    EXPECT_EQ(occurrences(all, std::string("id=\"") + id + "\""), 1u) << id;
  }
  EXPECT_NE(all.find("<nav>"), std::string::npos);
}

// memseal.fit/2: the model is the highest of the phases' models; a missed verification searched.
Json phasedFitDocument() {
  Json fit = fitDocument();
  fit["schema"] = "memseal.fit/2";
  fit["model"] = "phases";
  fit["phases"] = Json::array({{{"phase", "forward:0:AddmmBackward0"},
                                {"model", "linear"},
                                {"c0", 0.0},
                                {"c1", 1000.0},
                                {"c2", 0.0},
                                {"max_relative_residual", 0.0}},
                               {{"phase", "backward:3:ReluBackward0"},
                                {"model", "linear"},
                                {"c0", 1.0e6},
                                {"c1", 2.0 * kMiB},
                                {"c2", 0.0},
                                {"max_relative_residual", 0.01}},
                               {{"phase", "update"},
                                {"model", "linear"},
                                {"c0", 30.0 * kMiB},
                                {"c1", 0.0},
                                {"c2", 0.0},
                                {"max_relative_residual", 0.0}}});
  fit["phase_changes"] = Json::array(
      {{{"size", 8}, {"phase", "update"}}, {{"size", 15}, {"phase", "backward:3:ReluBackward0"}}});
  fit["limiting_phase"] = "backward:3:ReluBackward0";
  fit["largest_size"] = 210;
  fit["largest_size_measured"] = true;
  fit["verify"]["missed"] = true;
  fit["verify"]["within_budget"] = false;
  fit["verify"]["measured_max_size"] = 210;
  fit["verify"]["measured_max_peak_bytes"] = static_cast<std::int64_t>(440 * kMiB);
  fit["verify"]["searched"] = Json::array(
      {{{"size", 150}, {"peak_bytes", static_cast<std::int64_t>(300 * kMiB)}, {"fits", true}},
       {{"size", 220}, {"peak_bytes", static_cast<std::int64_t>(470 * kMiB)}, {"fits", false}},
       {{"size", 210}, {"peak_bytes", static_cast<std::int64_t>(440 * kMiB)}, {"fits", true}}});
  return fit;
}

TEST(HtmlReport, WhatWouldLowerThePeakIsATableOfChangesAndBytes) {
  std::string html = renderHtmlReport({{"explain", explainDocument()}}, "peak");
  EXPECT_NE(html.find("<h3>What would lower this peak</h3>"), std::string::npos);
  EXPECT_NE(html.find("<code>Net/encoder</code>"), std::string::npos);
  EXPECT_NE(html.find("up to 2.0 MiB"), std::string::npos);
  EXPECT_NE(html.find("<code>torch.autocast</code>"), std::string::npos);
  Json without = explainDocument();
  without.erase("remedies");
  EXPECT_EQ(renderHtmlReport({{"explain", without}}, "peak").find("What would lower"),
            std::string::npos);
}

TEST(HtmlReport, FitPhasesAndTheSearchAreShown) {
  std::string html = renderHtmlReport({{"fit", phasedFitDocument()}}, "fit");
  EXPECT_EQ(html.find("class=\"card warning\""), std::string::npos) << "fit/2 is read whole";
  EXPECT_NE(html.find("<h3>Phases</h3>"), std::string::npos);
  EXPECT_NE(html.find("then in backward at node 3 (ReluBackward0) from size 15"),
            std::string::npos);
  // The op phase never holds the peak: counted, not listed.
  EXPECT_EQ(html.find("forward at op 0"), std::string::npos);
  EXPECT_NE(html.find("1 more phases"), std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"verify searched\""), 3u);
  EXPECT_EQ(occurrences(html, "verify-mark over"), 1u);
  // The answer is the measured size, and the model's is still said.
  EXPECT_NE(html.find(">210<"), std::string::npos);
  EXPECT_NE(html.find("the model said 293"), std::string::npos);
  EXPECT_NE(html.find("class=\"model\""), std::string::npos);

  // memseal.fit/1 is read without a warning; a schema from elsewhere gets one.
  std::string older = renderHtmlReport({{"fit", fitDocument()}}, "fit");
  EXPECT_EQ(older.find("class=\"card warning\""), std::string::npos);
  Json future = fitDocument();
  future["schema"] = "memseal.fit/9";
  EXPECT_NE(renderHtmlReport({{"fit", future}}, "fit").find("class=\"card warning\""),
            std::string::npos);
}

TEST(HtmlReport, FitRefusalIsShownWithoutPrediction) {
  Json fit = fitDocument();
  fit["model"] = "none";
  fit["predicted_max_size"] = nullptr;
  fit["predicted_peak_bytes"] = nullptr;
  fit["verify"] = nullptr;
  fit["refusal"] = "no model describes the points within `tolerance`";
  std::string html = renderHtmlReport({{"fit", fit}}, "fit");
  EXPECT_NE(html.find("class=\"card refusal\""), std::string::npos);
  EXPECT_NE(html.find("no model describes the points"), std::string::npos);
  EXPECT_EQ(html.find("class=\"model"), std::string::npos);
  EXPECT_EQ(html.find("class=\"prediction\""), std::string::npos);
}

TEST(HtmlReport, EmptyAndMissingDocumentsStillRender) {
  std::string nothing = renderHtmlReport(Json::object(), "");
  EXPECT_NE(nothing.find("No report to show"), std::string::npos);
  EXPECT_EQ(nothing.find("<section"), std::string::npos);
  EXPECT_NE(nothing.find("</html>"), std::string::npos);

  std::string empty_check = renderHtmlReport({{"check", Json::object()}}, "x");
  EXPECT_NE(empty_check.find("data-verdict=\"no_leak\""), std::string::npos);
  EXPECT_NE(empty_check.find("id=\"timeline-chart\""), std::string::npos);
  EXPECT_NE(empty_check.find("no per-step samples"), std::string::npos);

  std::string empty_explain = renderHtmlReport({{"explain", Json::object()}}, "x");
  EXPECT_NE(empty_explain.find("id=\"roles-chart\""), std::string::npos);
  EXPECT_NE(empty_explain.find("id=\"peak-timeline-chart\""), std::string::npos);

  std::string empty_fit = renderHtmlReport({{"fit", Json::object()}}, "x");
  EXPECT_NE(empty_fit.find("id=\"fit-chart\""), std::string::npos);

  // Findings without anything but a category still get a card each.
  Json sparse = {{"findings", Json::array({{{"category", "tensors-retained"}}, Json::object()})}};
  std::string sparse_html = renderHtmlReport({{"check", sparse}}, "x");
  EXPECT_EQ(occurrences(sparse_html, "class=\"finding-card"), 2u);
  EXPECT_NE(sparse_html.find("data-verdict=\"leak\""), std::string::npos);

  // Files from before per_step carry only live_bytes[].
  Json old = {{"verdict", "no_leak"}, {"live_bytes", {100, 200, 300}}};
  std::string old_html = renderHtmlReport({{"check", old}}, "x");
  EXPECT_NE(old_html.find("class=\"live\""), std::string::npos);
}

// Every kind of wrong: strings for numbers, objects for strings, NaN and infinity, numbers past
// any real size, arrays of the wrong things.
Json wrongTypesPage() {
  double nan = std::numeric_limits<double>::quiet_NaN();
  double inf = std::numeric_limits<double>::infinity();
  Json check = {
      {"verdict", 7},
      {"steps", "thirty"},
      {"warmup", Json::array()},
      {"detected_at_step", "9"},
      {"backward_ran", "yes"},
      {"notes", "not an array"},
      {"findings", Json::array({{{"category", 3},
                                 {"retained", Json::object()},
                                 {"bytes_per_step", "4096"},
                                 {"count_per_step", nan},
                                 {"survivors", inf},
                                 {"frames", 12},
                                 {"tensor", "Float"},
                                 {"shapes", {{"min", "x"}, {"max", {1, 2}}}},
                                 {"parts", {{"op", 5}}},
                                 {"hint", Json::array({"a"})}},
                                "a string finding",
                                {{"frames", Json::array({1, "f", Json::object(), {{"line", "x"}}})},
                                 {"tensor", {{"shape", {"a", nullptr, 3}}, {"dtype", 1}}}}})},
      {"per_step", Json::array({"x",
                                1,
                                {{"step", "a"}, {"live_bytes", nan}},
                                {{"step", 1}, {"live_bytes", 1e300}, {"resident_bytes", -1e300}},
                                {{"step", 2}, {"live_bytes", -5}}})},
      {"python",
       {{"holders", {{{"finding", "0"}, {"description", 5}}, 3}},
        {"cycle_garbage", {{"tensors", 2}, {"types", {{{"type", 1}}}}}}}}};
  Json explain = {{"roles", {{{"role", 1}, {"bytes", "x"}}, "r", {{"role", "activations"}}}},
                  {"modules", {{{"module", 1}, {"roles", {{"activations", "x"}}}}, 3}},
                  {"sites", "none"},
                  {"tensors", {{{"tensor", 3}}}},
                  {"timeline", {{{"event", 1}}, {{"event", 2}, {"live_bytes", 1e30}}, 4}},
                  {"step_peaks", {{{"step", nan}}}},
                  {"identified", "both"},
                  {"peak_bytes", true}};
  Json fit = {{"points", {{{"size", 1}, {"peak_bytes", -1e300}}, {{"size", "2"}}, "p"}},
              {"model", "quadratic"},
              {"quadratic", {{"c0", 1}, {"c1", "x"}, {"c2", 1e200}}},
              {"linear", Json::array()},
              {"budget_bytes", -3},
              {"margin", 7},
              {"predicted_max_size", 1e300},
              {"predicted_peak_bytes", nan},
              {"verify", {{"size", inf}, {"within_budget", 1}}}};
  return {{"check", check}, {"explain", explain}, {"fit", fit}};
}

TEST(HtmlReport, WrongTypesAreTreatedAsMissing) {
  std::string html;
  ASSERT_NO_THROW(html = renderHtmlReport(wrongTypesPage(), "wrong types"));
  EXPECT_NE(html.find("id=\"timeline-chart\""), std::string::npos);
  EXPECT_NE(html.find("id=\"roles-chart\""), std::string::npos);
  EXPECT_NE(html.find("id=\"fit-chart\""), std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"finding-card"), 3u);
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(html.find("inf\""), std::string::npos);

  // Documents that are not objects, and pages that are not objects.
  EXPECT_NO_THROW(renderHtmlReport({{"check", "leak"}, {"explain", 3}, {"fit", {1, 2}}}, "x"));
  EXPECT_NE(renderHtmlReport({{"check", "leak"}}, "x").find("not a JSON object"),
            std::string::npos);
  EXPECT_NO_THROW(renderHtmlReport(Json::array({1, 2}), "x"));
  EXPECT_NO_THROW(renderHtmlReport(Json("text"), "x"));
  EXPECT_NO_THROW(renderHtmlReport(Json(), "x"));
}

TEST(HtmlReport, NothingIsLoadedFromElsewhere) {
  Json check = leakCheck();
  check["findings"][0]["frames"][2]["file"] = "http://example.com/x.js";
  check["findings"][0]["hint"] = "see https://example.com/<a href=\"https://evil\">";
  std::string html = renderHtmlReport(
      {{"check", check}, {"explain", explainDocument()}, {"fit", fitDocument()}}, "x");
  EXPECT_EQ(occurrences(html, "src="), 0u);
  EXPECT_EQ(occurrences(html, "href=\"http"), 0u);
  EXPECT_EQ(occurrences(html, "href='http"), 0u);
  EXPECT_EQ(occurrences(html, "url("), 0u);
  EXPECT_EQ(occurrences(html, "@import"), 0u);
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
  // Without document text that mentions one, the page names no address at all.
  std::string clean = renderHtmlReport(
      {{"check", noLeakCheck()}, {"explain", explainDocument()}, {"fit", fitDocument()}}, "x");
  EXPECT_EQ(occurrences(clean, "http://"), 0u);
  EXPECT_EQ(occurrences(clean, "https://"), 0u);
}

TEST(HtmlReport, LongRunsStayASizeABrowserOpens) {
  // The detector keeps up to 16,384 step boundaries; the chart thins them to peaks.
  Json check = leakCheck();
  check["per_step"] = perStep(16384, 5);
  std::string html = renderHtmlReport({{"check", check}}, "long");
  EXPECT_LT(html.size(), 250u * 1024);
  EXPECT_LE(occurrences(html, "class=\"column\""), 240u);
}

TEST(HtmlReport, ElementsAreBalanced) {
  std::string html = renderHtmlReport(
      {{"check", leakCheck()}, {"explain", explainDocument()}, {"fit", fitDocument()}}, "x");
  for (const char* name : {"div", "svg", "g", "table", "tr", "details", "section", "article", "ul",
                           "li", "dl", "text", "title", "code", "span"}) {
    EXPECT_EQ(occurrences(html, std::string("<") + name + ">") +
                  occurrences(html, std::string("<") + name + " "),
              occurrences(html, std::string("</") + name + ">"))
        << name;
  }
}

TEST(ScopeCss, EveryRuleAppliesInsideTheScopeOnly) {
  std::string css =
      ":root{--a:1}\nhtml{x:1}\nbody{margin:0}\n*{box-sizing:border-box}\n"
      ".card,td summary{color:red}\n"
      "@media (prefers-color-scheme:dark){:root{--a:2}.card{color:blue}}\n"
      "@media print{\nbody{background:#fff}\n.hover{display:none}}\n";
  std::string scoped = scopeCss(css, ".s");
  EXPECT_EQ(scoped,
            ".s{--a:1}\n.s{x:1}\n.s{margin:0}\n.s *{box-sizing:border-box}\n"
            ".s .card,.s td summary{color:red}\n"
            "@media (prefers-color-scheme:dark){.s{--a:2}\n.s .card{color:blue}\n}\n"
            "@media print{.s{background:#fff}\n.s .hover{display:none}\n}\n");
  EXPECT_EQ(scopeCss("", ".s"), "");
}

TEST(HtmlFragment, HasThePagesCardsWithoutThePage) {
  Json page = {{"check", leakCheck()}, {"explain", explainDocument()}, {"fit", fitDocument()}};
  std::string fragment = renderHtmlFragment(page, std::string("cell ") + kInjection);
  std::string full = renderHtmlReport(page, "cell");
  EXPECT_EQ(fragment.rfind("<div class=\"memseal-fragment\">", 0), 0u);
  for (const char* absent :
       {"<html", "<head>", "<body", "<script", "<meta", " &#183; memseal</title>", "<footer"}) {
    EXPECT_EQ(fragment.find(absent), std::string::npos) << absent;
  }
  // The same cards as the page: every finding, the peak and the fit.
  for (const char* card : {"class=\"finding-card", "id=\"timeline-chart\"", "id=\"roles-chart\"",
                           "id=\"fit-chart\""}) {
    EXPECT_EQ(occurrences(fragment, card), occurrences(full, card)) << card;
    EXPECT_GT(occurrences(fragment, card), 0u) << card;
  }
  EXPECT_NE(fragment.find("cell &lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(occurrences(fragment, "<div"), occurrences(fragment, "</div>"));
  // No rule of its style reaches outside it.
  std::size_t open = fragment.find("<style>") + 7;
  std::string style = fragment.substr(open, fragment.find("</style>") - open);
  EXPECT_EQ(style.find("\nbody"), std::string::npos);
  EXPECT_EQ(style.find(":root"), std::string::npos);
  EXPECT_NE(style.find(".memseal-fragment .card{"), std::string::npos);
}

// A check of a run with two CUDA devices: one caching, one steady.
Json withDevices(Json check) {
  Json per_step = Json::array();
  for (int step = 0; step < 20; ++step) {
    per_step.push_back({{"step", step},
                        {"allocated", (8 + (step % 3)) * kMiB},
                        {"reserved", step < 3 ? 40 * kMiB : 300 * kMiB}});
  }
  check["devices"] =
      Json::array({{{"device", "cuda:0"},
                    {"verdict", "caching"},
                    {"allocated", 8 * kMiB},
                    {"reserved", 300 * kMiB},
                    {"peak_allocated", 210 * kMiB},
                    {"peak_reserved", 300 * kMiB},
                    {"inactive_split_bytes", 2 * kMiB},
                    {"largest_free_extent", 256 * kMiB},
                    {"hint", std::string("call `torch.cuda.empty_cache()` ") + kInjection},
                    {"per_step", per_step}},
                   {{"device", "cuda:1"},
                    {"verdict", "steady"},
                    {"allocated", kMiB},
                    {"reserved", 20 * kMiB},
                    {"peak_allocated", kMiB},
                    {"peak_reserved", 20 * kMiB},
                    {"inactive_split_bytes", 0},
                    {"largest_free_extent", 19 * kMiB},
                    {"hint", ""},
                    {"per_step", Json::array()}}});
  return check;
}

TEST(HtmlReport, CudaMemorySectionShowsEachDeviceWhenThereAreDevices) {
  std::string html = renderHtmlReport({{"check", withDevices(noLeakCheck())}}, "gpu");
  ASSERT_NE(html.find("id=\"cuda-memory\""), std::string::npos);
  EXPECT_NE(html.find(">CUDA memory</h3>"), std::string::npos);
  EXPECT_NE(html.find("id=\"cuda-device-0\""), std::string::npos);
  EXPECT_NE(html.find("id=\"cuda-device-1\""), std::string::npos);
  EXPECT_NE(html.find("<h3>cuda:0</h3>"), std::string::npos);
  EXPECT_NE(html.find("caching, not a leak"), std::string::npos);
  EXPECT_NE(html.find("id=\"cuda-chart-0\""), std::string::npos);
  // The device with samples draws allocated (filled) and reserved; the one without says so.
  std::size_t chart = html.find("id=\"cuda-chart-0\"");
  std::size_t chart_end = html.find("id=\"cuda-device-1\"");
  std::string first_card = html.substr(chart, chart_end - chart);
  EXPECT_NE(first_card.find("class=\"live-area\""), std::string::npos);
  EXPECT_NE(first_card.find("class=\"resident\""), std::string::npos);
  EXPECT_NE(first_card.find("step 19&#10;allocated 9"), std::string::npos);
  EXPECT_NE(html.find("no step samples for this device"), std::string::npos);
  EXPECT_NE(html.find("300 MiB"), std::string::npos);
  // The hint is rich text, escaped.
  EXPECT_NE(html.find("<code>torch.cuda.empty_cache()</code>"), std::string::npos);
  EXPECT_EQ(html.find(kInjection), std::string::npos);
  for (const char* name : {"div", "svg", "g", "article", "span", "h3", "text", "title"}) {
    EXPECT_EQ(occurrences(html, std::string("<") + name + ">") +
                  occurrences(html, std::string("<") + name + " "),
              occurrences(html, std::string("</") + name + ">"))
        << name;
  }
}

TEST(HtmlReport, CudaMemorySectionIsAbsentWithoutDevices) {
  for (const Json& check : {leakCheck(), noLeakCheck()}) {
    std::string html = renderHtmlReport({{"check", check}}, "cpu");
    EXPECT_EQ(html.find("cuda-memory"), std::string::npos);
    EXPECT_EQ(html.find("CUDA memory"), std::string::npos);
  }
  Json empty = noLeakCheck();
  empty["devices"] = Json::array();
  EXPECT_EQ(renderHtmlReport({{"check", empty}}, "cpu").find("cuda-memory"), std::string::npos);
  Json wrong = noLeakCheck();
  wrong["devices"] = "cuda:0";
  EXPECT_EQ(renderHtmlReport({{"check", wrong}}, "cpu").find("cuda-memory"), std::string::npos);
}

// SHA-256 (FIPS 180-4), base64-encoded, as a Content-Security-Policy hash source is written.
std::string sha256Base64(const std::string& message) {
  static const std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string data = message + '\x80';
  while (data.size() % 64 != 56) data += '\0';
  std::uint64_t bits = static_cast<std::uint64_t>(message.size()) * 8;
  for (int i = 7; i >= 0; --i) data += static_cast<char>((bits >> (8 * i)) & 0xff);
  auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (std::size_t chunk = 0; chunk < data.size(); chunk += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = 0;
      for (int b = 0; b < 4; ++b) {
        w[i] = (w[i] << 8) | static_cast<unsigned char>(data[chunk + 4 * i + b]);
      }
    }
    for (int i = 16; i < 64; ++i) {
      std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t v[8];
    for (int i = 0; i < 8; ++i) v[i] = h[i];
    for (int i = 0; i < 64; ++i) {
      std::uint32_t s1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
      std::uint32_t choice = (v[4] & v[5]) ^ (~v[4] & v[6]);
      std::uint32_t t1 = v[7] + s1 + choice + k[i] + w[i];
      std::uint32_t s0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
      std::uint32_t majority = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      for (int j = 7; j > 0; --j) v[j] = v[j - 1];
      v[4] += t1;
      v[0] = t1 + s0 + majority;
    }
    for (int i = 0; i < 8; ++i) h[i] += v[i];
  }
  std::string digest;
  for (std::uint32_t word : h) {
    for (int b = 3; b >= 0; --b) digest += static_cast<char>((word >> (8 * b)) & 0xff);
  }
  static const char* const kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string encoded;
  for (std::size_t i = 0; i < digest.size(); i += 3) {
    std::uint32_t group = static_cast<unsigned char>(digest[i]) << 16;
    if (i + 1 < digest.size()) group |= static_cast<unsigned char>(digest[i + 1]) << 8;
    if (i + 2 < digest.size()) group |= static_cast<unsigned char>(digest[i + 2]);
    encoded += kAlphabet[(group >> 18) & 63];
    encoded += kAlphabet[(group >> 12) & 63];
    encoded += i + 1 < digest.size() ? kAlphabet[(group >> 6) & 63] : '=';
    encoded += i + 2 < digest.size() ? kAlphabet[group & 63] : '=';
  }
  return encoded;
}

TEST(HtmlReport, Sha256MatchesKnownDigests) {
  EXPECT_EQ(sha256Base64(""), "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
  EXPECT_EQ(sha256Base64("abc"), "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
}

// The Content-Security-Policy lets only the page's own script run, named by its hash, which the
// build computes from src/report/html/report.js: a hash that missed an edit would block the script
// in the browser (and the page would never say it is ready).
TEST(HtmlReport, ScriptHashMatchesScript) {
  std::string html = renderHtmlReport(Json::object(), "x");
  std::size_t open = html.find("<script>");
  std::size_t close = html.find("</script>");
  ASSERT_NE(open, std::string::npos);
  ASSERT_NE(close, std::string::npos);
  std::string script = html.substr(open + 8, close - open - 8);
  std::string expected = "script-src 'sha256-" + sha256Base64(script) + "'";
  EXPECT_NE(html.find(expected), std::string::npos)
      << "the build's hash of src/report/html/report.js is not sha256-" << sha256Base64(script);
  EXPECT_NE(script.find("memsealReady"), std::string::npos);
  EXPECT_NE(script.find("memsealErrors"), std::string::npos);
}

// Not a check: writes sample pages for tests/report/html_browser_check.py (and for people to look
// at) when MEMSEAL_HTML_SAMPLES_DIR names a directory.
TEST(HtmlReportSamples, WrittenWhenAsked) {
  const char* dir = std::getenv("MEMSEAL_HTML_SAMPLES_DIR");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "MEMSEAL_HTML_SAMPLES_DIR not set";
  std::filesystem::create_directories(dir);
  struct Sample {
    const char* name;
    Json page;
    std::string title;
  };
  const Sample samples[] = {
      {"check_leak", {{"check", leakCheck()}}, std::string("leaky_training ") + kInjection},
      {"check_no_leak", {{"check", noLeakCheck()}}, "clean_training"},
      {"check_cuda", {{"check", withDevices(noLeakCheck())}}, "gpu_training"},
      {"explain", {{"explain", explainDocument()}}, "train_step peak"},
      {"fit", {{"fit", fitDocument()}}, "batch size"},
      {"all",
       {{"check", leakCheck()}, {"explain", explainDocument()}, {"fit", fitDocument()}},
       "everything"},
      {"wrong_types", wrongTypesPage(), "wrong types"}};
  for (const Sample& sample : samples) {
    std::string base = std::string(dir) + "/" + sample.name;
    std::ofstream html(base + ".html");
    html << renderHtmlReport(sample.page, sample.title);
    std::ofstream json(base + ".json");
    json << sample.page.dump(2) << "\n";
    ASSERT_TRUE(html.good() && json.good()) << "could not write " << base;
  }
}

}  // namespace
}  // namespace memseal::report
