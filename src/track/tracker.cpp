// The public Tracker and ScopeGuard, thin layers over the engine.
#include "memseal/tracker.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "analyze/live_view.h"
#include "track/engine.h"
#include "track/option_values.h"
#include "track/thread_state.h"

namespace memseal {

namespace {

// N of "<prefix>N" in an environment variable's value, or std::invalid_argument saying so.
std::uint32_t positiveCount(const char* variable, const std::string& value, const char* prefix) {
  if (std::optional<std::uint32_t> count = track::countAfterPrefix(value, prefix)) return *count;
  throw std::invalid_argument(std::string(variable) + "=" + value + ": expected " + prefix +
                              "N with N a positive integer");
}

}  // namespace

TrackerOptions TrackerOptions::fromEnvironment() {
  TrackerOptions options;
  if (const char* stacks = std::getenv("MEMSEAL_STACKS")) {
    std::string value(stacks);
    if (value == "off" || value.empty()) {
      options.stacks = StackMode::kOff;
    } else if (value == "on") {
      options.stacks = StackMode::kOn;
    } else if (value.rfind("sample:", 0) == 0) {
      options.stacks = StackMode::kSampled;
      options.stack_sample_every = positiveCount("MEMSEAL_STACKS", value, "sample:");
    } else {
      throw std::invalid_argument("MEMSEAL_STACKS=" + value + ": expected off, on or sample:N");
    }
  }
  if (const char* metadata = std::getenv("MEMSEAL_TENSOR_METADATA")) {
    std::string value(metadata);
    if (value != "0" && value != "1") {
      throw std::invalid_argument("MEMSEAL_TENSOR_METADATA=" + value + ": expected 0 or 1");
    }
    options.record_tensor_metadata = value == "1";
  }
  if (const char* ops = std::getenv("MEMSEAL_OBSERVE_OPS")) {
    std::string value(ops);
    if (value == "all" || value.empty()) {
      options.observe_ops = true;
      options.observe_ops_every = 1;
    } else if (value == "off") {
      options.observe_ops = false;
    } else if (value.rfind("every:", 0) == 0) {
      options.observe_ops = true;
      options.observe_ops_every = positiveCount("MEMSEAL_OBSERVE_OPS", value, "every:");
    } else {
      throw std::invalid_argument("MEMSEAL_OBSERVE_OPS=" + value +
                                  ": expected all, off or every:N");
    }
  }
  return options;
}

Tracker::Tracker(TrackerOptions options) : options_(options) {}

Tracker::~Tracker() { stop(); }

void Tracker::start() {
  if (running_) return;
  track::Engine::instance().start(options_);
  running_ = true;
}

void Tracker::stop() {
  if (!running_) return;
  track::Engine::instance().stop();
  running_ = false;
}

bool Tracker::running() const { return running_; }

DeviceStats Tracker::stats() const { return track::Engine::instance().cpu().read("cpu"); }

Snapshot Tracker::snapshot(std::size_t max_examples_per_site) const {
  Snapshot snapshot;
  snapshot.cpu = stats();
  std::vector<analyze::LiveItem> items = analyze::collectLive();
  // Newest first within each site.
  std::sort(items.begin(), items.end(), [](const analyze::LiveItem& a, const analyze::LiveItem& b) {
    return a.record.time_ns > b.record.time_ns;
  });
  std::map<std::uint32_t, SiteSnapshot> by_site;
  for (const analyze::LiveItem& item : items) {
    SiteSnapshot& site = by_site[item.record.site];
    site.live_bytes += static_cast<std::int64_t>(item.record.bytes);
    site.live_count += 1;
    if (site.allocations.size() < max_examples_per_site) {
      site.allocations.push_back(analyze::describeAllocation(item));
    }
  }
  track::Engine& engine = track::Engine::instance();
  for (auto& [site_id, site] : by_site) {
    site.site = analyze::describeSite(site_id);
    const track::SiteEntry& entry = engine.site(site_id);
    site.allocated_bytes_total = entry.allocated_bytes_total.load();
    site.allocations_total = entry.allocations_total.load();
    snapshot.sites.push_back(std::move(site));
  }
  std::sort(
      snapshot.sites.begin(), snapshot.sites.end(),
      [](const SiteSnapshot& a, const SiteSnapshot& b) { return a.live_bytes > b.live_bytes; });
  return snapshot;
}

bool trackingActive() { return track::Engine::instance().active(); }

void setStep(std::uint32_t step) { track::Engine::instance().setStep(step); }

std::uint32_t currentStep() {
  return track::Engine::instance().step.load(std::memory_order_relaxed);
}

ScopeGuard::ScopeGuard(const char* name) {
  track::ThreadState& state = track::threadState();
  previous_path_ = state.scope_path;
  bool was_in_tracker = state.in_tracker;
  state.in_tracker = true;
  state.scope_path = track::Engine::instance().internScopePath(previous_path_, name);
  state.in_tracker = was_in_tracker;
}

ScopeGuard::~ScopeGuard() { track::threadState().scope_path = previous_path_; }

}  // namespace memseal
