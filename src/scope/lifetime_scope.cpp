// Lifetime scopes over the tracker: each allocation records the innermost scope active on its
// thread; closing a scope lists that scope's allocations still alive.
#include "memseal/scope.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <iostream>
#include <optional>
#include <sstream>

#include "analyze/live_view.h"
#include "report/format.h"
#include "track/engine.h"
#include "track/thread_state.h"

namespace memseal {

namespace {

std::atomic<std::uint32_t> g_next_scope_id{0};

// Moves the record of `tensor`'s storage from scope `from` to scope `to`; true if it moved.
bool moveRecord(const at::TensorBase& tensor, std::uint32_t from, std::uint32_t to,
                std::size_t* bytes) {
  if (!tensor.defined() || !tensor.unsafeGetTensorImpl()->has_storage()) return false;
  const c10::DataPtr& data_ptr = tensor.unsafeGetTensorImpl()->storage().data_ptr();
  if (data_ptr.get_deleter() != &track::Engine::trackedFree) return false;
  bool moved = false;
  track::Engine::instance().live().update(data_ptr.get(), [&](track::LiveRecord& record) {
    if (record.lifetime_scope != from) return;
    record.lifetime_scope = to;
    *bytes = record.bytes;
    moved = true;
  });
  return moved;
}

}  // namespace

std::string ScopeReport::toText() const {
  std::ostringstream out;
  if (clean()) {
    out << "memseal scope '" << name << "': clean (" << stats.made << " made, " << stats.freed
        << " freed, " << stats.kept << " kept)\n";
    return out.str();
  }
  out << "memseal scope '" << name << "': " << stats.survivors << " tensor"
      << (stats.survivors == 1 ? "" : "s") << " (" << report::bytesText(stats.survivor_bytes)
      << ") made here " << (stats.survivors == 1 ? "is" : "are") << " still alive\n";
  out << "  made " << stats.made << " (" << report::bytesText(stats.made_bytes) << "), freed "
      << stats.freed << ", kept " << stats.kept << " (" << report::bytesText(stats.kept_bytes)
      << "), survivors " << stats.survivors << "\n";
  int index = 0;
  for (const ScopeSurvivor& survivor : survivors) {
    out << "  [" << ++index << "] "
        << report::bytesText(static_cast<std::int64_t>(survivor.allocation.bytes)) << "  "
        << report::tensorText(survivor.allocation.tensor) << "\n";
    out << "      made by " << survivor.site.op;
    if (!survivor.site.outer_op.empty() && survivor.site.outer_op != survivor.site.op) {
      out << " (inside " << survivor.site.outer_op << ")";
    }
    out << "\n";
    for (const std::string& line : report::stackLines(survivor.site.frames)) {
      out << "      at " << line << "\n";
    }
  }
  out << "  fix: keep what must outlive the scope with scope.keep(tensor); anything else still "
         "alive is held by a container, a cache or a member that outlives the scope.\n";
  return out.str();
}

ScopeLeakError::ScopeLeakError(ScopeReport report)
    : std::runtime_error(report.toText()), report_(std::move(report)) {}

struct LifetimeScope::State {
  std::string name;
  ScopeOptions options;
  std::uint32_t id = 0;
  std::uint32_t parent = 0;
  std::uint64_t allocations_at_start = 0;
  std::uint64_t bytes_at_start = 0;
  std::int64_t kept = 0;
  std::int64_t kept_bytes = 0;
  std::optional<Tracker> own_tracker;
  int uncaught_at_start = 0;
  bool closed = false;
};

LifetimeScope::LifetimeScope(std::string name, ScopeOptions options)
    : state_(std::make_unique<State>()) {
  if (options.on_survivors == ScopePolicy::kCallback && !options.on_survivors_callback) {
    throw std::invalid_argument("memseal: ScopePolicy::kCallback needs on_survivors_callback");
  }
  State& state = *state_;
  state.name = std::move(name);
  state.options = std::move(options);
  if (!trackingActive()) {
    state.own_tracker.emplace(state.options.tracker);
    state.own_tracker->start();
  }
  track::ThreadState& thread = track::threadState();
  state.id = g_next_scope_id.fetch_add(1, std::memory_order_relaxed) + 1;
  state.parent = thread.lifetime_scope;
  state.allocations_at_start = thread.allocations_in_thread;
  state.bytes_at_start = thread.bytes_in_thread;
  state.uncaught_at_start = std::uncaught_exceptions();
  thread.lifetime_scope = state.id;
}

LifetimeScope::~LifetimeScope() {
  if (state_->closed) return;
  if (std::uncaught_exceptions() > state_->uncaught_at_start) {
    // An exception is unwinding: restore the enclosing scope and say nothing, as a dispose scope
    // would still dispose. The exception is what the user needs to see.
    track::threadState().lifetime_scope = state_->parent;
    state_->closed = true;
    return;
  }
  try {
    if (state_->options.on_survivors == ScopePolicy::kThrow) {
      state_->options.on_survivors = ScopePolicy::kReport;  // a destructor must not throw
    }
    close();
  } catch (const std::exception& error) {
    std::cerr << "memseal: closing scope '" << state_->name << "' failed: " << error.what() << "\n";
  }
}

void LifetimeScope::moveToEnclosingScope(const at::TensorBase& tensor) {
  std::size_t bytes = 0;
  if (!state_->closed && moveRecord(tensor, state_->id, state_->parent, &bytes)) {
    ++state_->kept;
    state_->kept_bytes += static_cast<std::int64_t>(bytes);
  }
}

void LifetimeScope::removeFromScopes(const at::TensorBase& tensor) {
  std::size_t bytes = 0;
  if (!state_->closed && moveRecord(tensor, state_->id, 0, &bytes)) {
    ++state_->kept;
    state_->kept_bytes += static_cast<std::int64_t>(bytes);
  }
}

ScopeReport LifetimeScope::close() {
  State& state = *state_;
  if (state.closed) throw std::logic_error("memseal: scope '" + state.name + "' closed twice");
  state.closed = true;
  track::ThreadState& thread = track::threadState();
  if (thread.lifetime_scope != state.id) {
    throw std::logic_error("memseal: scope '" + state.name +
                           "' closed while an inner scope is still open; close inner scopes first");
  }
  thread.lifetime_scope = state.parent;

  ScopeReport report;
  report.name = state.name;
  report.stats.made =
      static_cast<std::int64_t>(thread.allocations_in_thread - state.allocations_at_start);
  report.stats.made_bytes =
      static_cast<std::int64_t>(thread.bytes_in_thread - state.bytes_at_start);
  report.stats.kept = state.kept;
  report.stats.kept_bytes = state.kept_bytes;
  {
    std::uint32_t id = state.id;
    std::vector<analyze::LiveItem> items = analyze::collectLive(
        [id](const track::LiveRecord& record) { return record.lifetime_scope == id; });
    std::sort(items.begin(), items.end(),
              [](const analyze::LiveItem& a, const analyze::LiveItem& b) {
                return a.record.time_ns > b.record.time_ns;
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
  switch (state.options.on_survivors) {
    case ScopePolicy::kThrow:
      throw ScopeLeakError(report);
    case ScopePolicy::kReport:
      std::cerr << report.toText();
      break;
    case ScopePolicy::kCallback:
      state.options.on_survivors_callback(report);
      break;
    case ScopePolicy::kNone:
      break;
  }
  return report;
}

NoAllocationScope::NoAllocationScope() {
  track::Engine::instance().acquireAllocatorHook();
  start_ = track::threadState().system_allocations;
}

NoAllocationScope::~NoAllocationScope() { track::Engine::instance().releaseAllocatorHook(); }

std::int64_t NoAllocationScope::allocations() const {
  return static_cast<std::int64_t>(track::threadState().system_allocations - start_);
}

}  // namespace memseal
