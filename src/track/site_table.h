// Allocation sites and what names them: interned strings (op names, scope names, grad_fn types),
// MEMSEAL_REGION paths, native stacks and the sites themselves (op, outer op, scope path, stack).
// Insert-only tables: ids stay valid for the process, lookups of known keys take no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/branch_hints.h"
#include "memseal/tracker.h"
#include "track/insert_only_table.h"
#include "track/stack_capture.h"
#include "track/thread_state.h"

namespace torch::autograd {
struct Node;
}

namespace memseal::track {

struct SiteKey {
  std::uint32_t inner_op;
  std::uint32_t outer_op;
  std::uint32_t scope_path;
  std::uint32_t stack;  // 0 unless stacks are on for every allocation
  bool operator==(const SiteKey& o) const {
    return inner_op == o.inner_op && outer_op == o.outer_op && scope_path == o.scope_path &&
           stack == o.stack;
  }
};

struct SiteEntry {
  SiteKey key{};
  std::atomic<std::uint32_t> example_stack{0};  // a sampled stack when stacks are sampled
  // What threads handed over of the site's totals; the rest is in their caches (site_totals.h).
  std::atomic<std::int64_t> allocated_bytes_total{0};
  std::atomic<std::int64_t> allocations_total{0};
  bool matches(const SiteKey& k) const { return key == k; }
};

class SiteTable {
 public:
  SiteTable();
  SiteTable(const SiteTable&) = delete;
  SiteTable& operator=(const SiteTable&) = delete;

  std::uint32_t internString(const char* text);
  const char* string(std::uint32_t id) const;  // "" for 0
  std::uint32_t internScopePath(std::uint32_t parent, const char* name);
  std::string scopePathText(std::uint32_t id) const;
  // The interned name of a grad_fn's type ("AddBackward0"); builds the name once per type.
  std::uint32_t gradFnNameId(const torch::autograd::Node& node);

  SiteEntry& site(std::uint32_t id) { return sites_.at(id); }
  const SiteEntry& site(std::uint32_t id) const { return sites_.at(id); }
  bool isOverflowSite(std::uint32_t id) const { return id == overflow_site_; }
  // The stack with this id, or nullptr when stacks were never turned on or id is 0.
  const StackEntry* stack(std::uint32_t id) const;

  // The site an allocation made now on this thread gets (interns as needed, captures a stack when
  // stacks are on or this allocation is sampled); outside any watched op its op is the string
  // `name_outside_ops` (0: none). `bytes`: the allocation's size, 0 for an op's output; where
  // steps vary, a capture matching the last watched step's at its place reuses that one's site
  // (track/step_sites.h).
  std::uint32_t currentSite(ThreadState& state, std::uint32_t name_outside_ops = 0,
                            std::uint64_t bytes = 0);
  // The same, but with `name` as its op inside ops too (the outermost op stays): for what memseal
  // hands out itself, such as a pool's leases.
  std::uint32_t currentSiteNamed(ThreadState& state, std::uint32_t name);
  // The op and scope part of currentSite, never a stack: for callers that may not unwind or take
  // the GIL (the CUDA allocator's trace hook runs under the allocator's lock).
  std::uint32_t currentOpSite(ThreadState& state, std::uint32_t name_outside_ops = 0);

  // At session start, before any allocation of the session is tracked.
  void configureStacks(StackMode mode, std::uint32_t sample_every);
  // Zeroes each site's totals and forgets its sampled stack: sites outlive sessions, and a session
  // with stacks off must not show a stack an earlier session sampled at the same site.
  void resetForSession();

 private:
  struct StringEntry {
    char* text = nullptr;  // owned, never freed (ids stay valid for the process)
    bool matches(const char* key) const { return std::strcmp(text, key) == 0; }
  };
  // A MEMSEAL_REGION path is a chain: (parent path, name).
  struct ScopePathKey {
    std::uint32_t parent;
    std::uint32_t name;
  };
  struct ScopePathEntry {
    ScopePathKey key{};
    bool matches(const ScopePathKey& k) const {
      return key.parent == k.parent && key.name == k.name;
    }
  };
  struct TypeNameEntry {
    const void* type = nullptr;
    std::uint32_t name = 0;
    bool matches(const void* key) const { return type == key; }
  };

  // The site of `key`, interned on first sight; the thread's memo answers a repeated key inline.
  std::uint32_t siteFor(ThreadState& state, const SiteKey& key) {
    static_assert(sizeof(SiteKey) == sizeof(state.site_memo.key), "the memo holds a whole key");
    if (MEMSEAL_LIKELY(state.site_memo.site != 0 &&
                       std::memcmp(state.site_memo.key, &key, sizeof(SiteKey)) == 0)) {
      return state.site_memo.site;
    }
    return lookUpSite(state, key);
  }
  std::uint32_t lookUpSite(ThreadState& state, const SiteKey& key);
  // The ops and scope the thread is in now (inner op `name_outside_ops` outside any op).
  SiteKey opKey(ThreadState& state, std::uint32_t name_outside_ops);
  std::uint32_t siteWithStack(ThreadState& state, SiteKey key, std::uint64_t bytes);

  InsertOnlyTable<StringEntry, 8192> strings_;
  InsertOnlyTable<ScopePathEntry, 4096> scope_paths_;
  InsertOnlyTable<SiteEntry, 16384> sites_;
  InsertOnlyTable<TypeNameEntry, 2048> grad_fn_names_;
  std::uint32_t overflow_site_ = 0;
  std::atomic<StackTable*> stacks_{nullptr};
  // Read on every allocation: atomics, since a session may start while other threads allocate.
  std::atomic<StackMode> stack_mode_{StackMode::kOff};
  std::atomic<std::uint32_t> stack_sample_every_{1};
};

// Never destroyed: ids appear in records freed late. Inline: the hot path reaches it on every
// allocation.
inline SiteTable& siteTable() {
  static auto* table = new SiteTable();
  return *table;
}

}  // namespace memseal::track
