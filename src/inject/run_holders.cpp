#include "inject/run_holders.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "detect/findings.h"
#include "detect/program_end.h"
#include "inject/time_scale.h"
#include "report/json_fields.h"

namespace memseal::inject {

namespace {

using Json = nlohmann::json;

Json framesRequest(const AllocationSite& site) {
  Json frames = Json::array();
  for (const StackFrame& frame : site.frames) {
    if (frame.library != "python") continue;  // the search matches the program's functions
    frames.push_back(
        {{"file", frame.file}, {"function", frame.function}, {"internal", frame.is_internal}});
  }
  return frames;
}

// What was held and freed before the report is no longer there: its addresses may be others' now.
bool gone(const LeakFinding& finding) { return finding.freed && !finding.freed->building_up; }

// Whether the search has something of the finding to start from: storage it retains, or a graph
// whose root's type it can look for (resident growth has neither). A finding without (a report
// made after the function that held it returned) leaves its cause to a later search.
bool searchable(const LeakFinding& finding) {
  if (finding.category == LeakCategory::kUntrackedGrowth || gone(finding)) return false;
  if (detect::isGraphFinding(finding) && !finding.tensor.grad_fn.empty()) return true;
  return std::any_of(finding.parts.begin(), finding.parts.end(),
                     [](const LeakPart& part) { return !part.storage_addresses.empty(); });
}

// A cause as holders follow it from report to report: causeOf (category and op) and the Python
// line that made it, so that one op's results kept by two lines keep their own holders.
std::string holderCause(const LeakFinding& finding) {
  std::string cause = detect::causeOf(finding);
  for (const StackFrame& frame : finding.site.frames) {
    if (frame.library == "python" && !frame.is_internal) {
      return cause + "|" + frame.file + ":" + std::to_string(frame.line);
    }
  }
  return cause;
}

}  // namespace

std::string holderSearchRequest(const LeakReport& report) {
  Json findings = Json::array();
  for (const LeakFinding& finding : report.findings) {
    Json parts = Json::array();
    for (const LeakPart& part : finding.parts) {
      Json addresses = gone(finding) ? Json::array() : Json(part.storage_addresses);
      parts.push_back({{"storage_addresses", addresses}, {"frames", framesRequest(part.site)}});
    }
    Json freed = nullptr;
    if (finding.freed) freed = {{"building_up", finding.freed->building_up}};
    findings.push_back({{"category", categoryId(finding.category)},
                        {"grad_fn", finding.tensor.grad_fn},
                        {"freed", freed},
                        {"frames", framesRequest(finding.site)},
                        {"parts", parts}});
  }
  return Json{{"findings", findings}}.dump();
}

std::vector<LeakHolder> holdersFromSearch(const std::string& answer) {
  std::vector<LeakHolder> holders;
  try {
    nlohmann::ordered_json items = nlohmann::ordered_json::parse(answer);
    if (!items.is_array()) report::fail("the answer is not an array");
    for (std::size_t i = 0; i < items.size(); ++i) {
      holders.push_back(report::readHolder(items[i], "holders[" + std::to_string(i) + "]"));
    }
  } catch (const std::exception& error) {  // not JSON, or not holders
    holders = {LeakHolder{
        -1, std::string("the holder search gave what memseal cannot read (") + error.what() + ")",
        "unnamed", 0, false}};
  }
  return holders;
}

RunHolders::RunHolders(Search search) : search_(std::move(search)) {}

std::vector<std::string> RunHolders::causesToSearch(const LeakReport& report, When when) const {
  std::vector<std::string> causes;
  for (const LeakFinding& finding : report.findings) {
    std::string cause = holderCause(finding);
    bool again = when == When::kCodeEnded || (when != When::kEarly && early_.count(cause) != 0);
    if (searchable(finding) && (searched_.count(cause) == 0 || again)) {
      causes.push_back(std::move(cause));
    }
  }
  return causes;
}

void RunHolders::attach(LeakReport& report, When when) {
  using Clock = std::chrono::steady_clock;
  if (!report.leak) return;
  std::vector<std::string> causes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bool due = when == When::kNow || when == When::kCodeEnded || when == When::kEarly ||
               (when == When::kWhenDue && Clock::now() >= next_search_);
    if (due) causes = causesToSearch(report, when);
  }
  if (!causes.empty()) {
    Clock::time_point start = Clock::now();
    std::optional<std::string> answer = search_(holderSearchRequest(report));
    Clock::time_point done = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    next_search_ = done + std::max<Clock::duration>(scaledByTimeScale(std::chrono::seconds(1)),
                                                    20 * (done - start));
    if (answer) {
      about_search_.clear();
      std::map<std::string, std::vector<LeakHolder>> fresh;
      for (LeakHolder& holder : holdersFromSearch(*answer)) {
        if (holder.finding < 0 || holder.finding >= static_cast<int>(report.findings.size())) {
          holder.finding = -1;  // a line about the search; no finding of this report is its
          about_search_.push_back(std::move(holder));
          continue;
        }
        std::string cause = holderCause(report.findings[static_cast<std::size_t>(holder.finding)]);
        if (std::find(causes.begin(), causes.end(), cause) != causes.end()) {
          fresh[cause].push_back(std::move(holder));
        }
      }
      // A cause's holders come from the first search that looked for it, or from a later one
      // (after an early one, or as the code ends) that finds it still held.
      for (const std::string& cause : causes) {
        bool again = searched_.count(cause) != 0;
        early_.erase(cause);
        if (!again && when == When::kEarly) early_.insert(cause);
        if (!again || !fresh[cause].empty()) found_[cause] = std::move(fresh[cause]);
        searched_.insert(cause);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  report.holders.clear();
  for (std::size_t i = 0; i < report.findings.size(); ++i) {
    auto holders = found_.find(holderCause(report.findings[i]));
    if (holders == found_.end()) continue;
    for (LeakHolder holder : holders->second) {
      holder.finding = static_cast<int>(i);
      report.holders.push_back(std::move(holder));
    }
  }
  report.holders.insert(report.holders.end(), about_search_.begin(), about_search_.end());
}

}  // namespace memseal::inject
