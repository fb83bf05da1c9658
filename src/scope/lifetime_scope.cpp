// Lifetime scopes over the tracker: each allocation records the innermost scope active on its
// thread; closing a scope lists that scope's allocations still alive.
#include "memseal/scope.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <iostream>
#include <optional>

#include "analyze/live_view.h"
#include "common/policy.h"
#include "track/lifetime_scopes.h"

namespace memseal {

namespace {

std::atomic<std::uint32_t> g_next_scope_id{0};

TrackerOptions scopeDefaults() {
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOn;
  return defaults;
}

}  // namespace

ScopeLeakError::ScopeLeakError(ScopeReport report)
    : std::runtime_error(report.toText()), report_(std::move(report)) {}

struct LifetimeScope::State {
  std::string name;
  ScopeOptions options;
  std::uint32_t id = 0;
  std::uint32_t parent = 0;
  track::ThreadAllocationCounts at_start;
  std::int64_t kept = 0;
  std::int64_t kept_bytes = 0;
  std::optional<Tracker> own_tracker;
  int uncaught_at_start = 0;
  bool closed = false;
};

LifetimeScope::LifetimeScope(std::string name, ScopeOptions options)
    : state_(std::make_unique<State>()) {
  if (options.on_survivors == ReportPolicy::kCallback && !options.on_survivors_callback) {
    throw std::invalid_argument("memseal: ReportPolicy::kCallback needs on_survivors_callback");
  }
  State& state = *state_;
  state.name = std::move(name);
  state.options = std::move(options);
  if (!trackingActive()) {
    state.own_tracker.emplace(state.options.tracker.resolved(scopeDefaults()));
    state.own_tracker->start();
  }
  state.id = g_next_scope_id.fetch_add(1, std::memory_order_relaxed) + 1;
  state.at_start = track::threadAllocationCounts();
  state.uncaught_at_start = std::uncaught_exceptions();
  state.parent = track::enterLifetimeScope(state.id);
}

LifetimeScope::~LifetimeScope() {
  if (state_->closed) return;
  if (std::uncaught_exceptions() > state_->uncaught_at_start) {
    // An exception is unwinding: restore the enclosing scope and say nothing, as a dispose scope
    // would still dispose. The exception is what the user needs to see.
    track::enterLifetimeScope(state_->parent);
    state_->closed = true;
    return;
  }
  try {
    if (state_->options.on_survivors == ReportPolicy::kThrow) {
      state_->options.on_survivors = ReportPolicy::kWarn;  // a destructor must not throw
    }
    close();
  } catch (const std::exception& error) {
    std::cerr << "memseal: closing scope '" << state_->name << "' failed: " << error.what() << "\n";
  }
}

void LifetimeScope::moveToEnclosingScope(const at::TensorBase& tensor) {
  std::size_t bytes = 0;
  if (!state_->closed && track::moveToLifetimeScope(tensor, state_->id, state_->parent, &bytes)) {
    ++state_->kept;
    state_->kept_bytes += static_cast<std::int64_t>(bytes);
  }
}

void LifetimeScope::removeFromScopes(const at::TensorBase& tensor) {
  std::size_t bytes = 0;
  if (!state_->closed && track::moveToLifetimeScope(tensor, state_->id, 0, &bytes)) {
    ++state_->kept;
    state_->kept_bytes += static_cast<std::int64_t>(bytes);
  }
}

ScopeReport LifetimeScope::close() {
  State& state = *state_;
  if (state.closed) throw std::logic_error("memseal: scope '" + state.name + "' closed twice");
  state.closed = true;
  if (track::currentLifetimeScope() != state.id) {
    throw std::logic_error("memseal: scope '" + state.name +
                           "' closed while an inner scope is still open; close inner scopes first");
  }
  track::enterLifetimeScope(state.parent);

  track::ThreadAllocationCounts now = track::threadAllocationCounts();
  ScopeReport report;
  report.name = state.name;
  report.stats.made = static_cast<std::int64_t>(now.tracked - state.at_start.tracked);
  report.stats.made_bytes =
      static_cast<std::int64_t>(now.tracked_bytes - state.at_start.tracked_bytes);
  report.stats.kept = state.kept;
  report.stats.kept_bytes = state.kept_bytes;
  {
    std::uint32_t id = state.id;
    std::vector<analyze::LiveItem> items = analyze::collectLive(
        [id](const track::LiveRecord& record) { return record.lifetime_scope == id; },
        analyze::LiveSet::kHeld);
    std::sort(items.begin(), items.end(),
              [](const analyze::LiveItem& a, const analyze::LiveItem& b) {
                return analyze::newerThan(a.record, b.record);
              });
    for (const analyze::LiveItem& item : items) {
      report.stats.survivors += 1;
      report.stats.survivor_bytes += static_cast<std::int64_t>(item.record.bytes);
      report.survivors.push_back(
          {analyze::describeSite(item.record.site), analyze::describeAllocation(item)});
    }
  }
  // Kept tensors may also come from nested scopes, so `freed` never goes below zero.
  report.stats.freed =
      std::max<std::int64_t>(0, report.stats.made - report.stats.survivors - report.stats.kept);
  if (state.own_tracker) state.own_tracker->stop();
  if (report.clean()) return report;
  common::applyPolicy<ScopeLeakError>(state.options.on_survivors, report,
                                      state.options.on_survivors_callback);
  return report;
}

}  // namespace memseal
