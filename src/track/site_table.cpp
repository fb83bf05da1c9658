// Interning happens on the hot path the first time a key is seen, then never again for it: op
// frames cache their name's id, and sites are looked up without a lock.
#include "track/site_table.h"

#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <typeinfo>

#include "common/branch_hints.h"
#include "track/hashing.h"
#include "track/python_frames.h"
#include "track/session.h"
#include "track/step_sites.h"

namespace memseal::track {

namespace {

// Only touched on steps whose ops are watched while steps vary; freed when the thread exits.
thread_local StepSites t_step_sites;

}  // namespace

SiteTable::SiteTable() {
  SiteKey overflow{UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
  overflow_site_ = sites_.findOrInsert(mixBits(UINT32_MAX), overflow,
                                       [&](SiteEntry& entry) { entry.key = overflow; });
}

std::uint32_t SiteTable::internString(const char* text) {
  if (text == nullptr) return 0;
  return strings_.findOrInsert(hashString(text), text, [&](StringEntry& entry) {
    std::size_t length = std::strlen(text);
    entry.text = static_cast<char*>(std::malloc(length + 1));
    if (entry.text != nullptr) std::memcpy(entry.text, text, length + 1);
  });
}

const char* SiteTable::string(std::uint32_t id) const {
  if (id == 0) return "";
  const char* text = strings_.at(id).text;
  return text != nullptr ? text : "";
}

std::uint32_t SiteTable::internScopePath(std::uint32_t parent, const char* name) {
  ScopePathKey key{parent, internString(name)};
  return scope_paths_.findOrInsert(combineHash(key.parent, key.name), key,
                                   [&](ScopePathEntry& entry) { entry.key = key; });
}

std::string SiteTable::scopePathText(std::uint32_t id) const {
  std::string path;
  while (id != 0) {
    const ScopePathEntry& entry = scope_paths_.at(id);
    std::string name = string(entry.key.name);
    path = path.empty() ? name : name + "/" + path;
    id = entry.key.parent;
  }
  return path;
}

std::uint32_t SiteTable::gradFnNameId(const torch::autograd::Node& node) {
  const void* type = &typeid(node);
  std::uint64_t hash = mixBits(reinterpret_cast<std::uintptr_t>(type));
  std::uint32_t found = grad_fn_names_.find(hash, type);
  if (found != 0) return grad_fn_names_.at(found).name;
  // First time this node type is seen: name() builds a std::string, once per type.
  std::uint32_t name = internString(node.name().c_str());
  std::uint32_t id = grad_fn_names_.findOrInsert(hash, type, [&](TypeNameEntry& entry) {
    entry.type = type;
    entry.name = name;
  });
  return id != 0 ? grad_fn_names_.at(id).name : name;
}

const StackEntry* SiteTable::stack(std::uint32_t id) const {
  StackTable* table = stacks_.load(std::memory_order_acquire);
  if (table == nullptr || id == 0) return nullptr;
  return &table->at(id);
}

void SiteTable::configureStacks(StackMode mode, std::uint32_t sample_every) {
  stack_sample_every_.store(std::max<std::uint32_t>(1, sample_every));
  stack_mode_.store(mode);
  if (mode != StackMode::kOff && stacks_.load() == nullptr) {
    stacks_.store(new StackTable());  // kept for the process: stack ids stay valid in reports
    warmUpStackCapture();
  }
}

void SiteTable::resetForSession() {
  sites_.forEach([](std::uint32_t, SiteEntry& entry) {
    entry.allocated_bytes_total.store(0, std::memory_order_relaxed);
    entry.allocations_total.store(0, std::memory_order_relaxed);
    entry.example_stack.store(0, std::memory_order_relaxed);
  });
}

std::uint32_t SiteTable::lookUpSite(ThreadState& state, const SiteKey& key) {
  std::uint64_t hash =
      combineHash(combineHash(key.inner_op, key.outer_op), combineHash(key.scope_path, key.stack));
  std::uint32_t id = sites_.findOrInsert(hash, key, [&](SiteEntry& entry) { entry.key = key; });
  if (id == 0) return overflow_site_;  // a full table: a later key may still find room
  std::memcpy(state.site_memo.key, &key, sizeof(SiteKey));
  state.site_memo.site = id;
  return id;
}

// Inline: on every allocation outside a replayed step.
[[gnu::always_inline]] inline SiteKey SiteTable::opKey(ThreadState& state,
                                                       std::uint32_t name_outside_ops) {
  SiteKey key{name_outside_ops, 0, state.scope_path, 0};
  std::uint32_t depth = std::min<std::uint32_t>(state.op_depth, kMaxOpDepth);
  if (depth > 0) {
    OpFrame& inner = state.ops[depth - 1];
    if (inner.name_id == 0) inner.name_id = internString(inner.name);
    OpFrame& outer = state.ops[0];
    if (outer.name_id == 0) outer.name_id = internString(outer.name);
    key.inner_op = inner.name_id;
    key.outer_op = outer.name_id;
  }
  return key;
}

// The barrier after siteWithStack keeps it from being a tail call, which would take this frame off
// the stack and make its fixed skip count drop a frame of the caller's.
std::uint32_t SiteTable::currentSite(ThreadState& state, std::uint32_t name_outside_ops,
                                     std::uint64_t bytes) {
  // No stack to capture, so no frames to skip: the ops and scope name the site.
  if (stack_mode_.load(std::memory_order_relaxed) == StackMode::kOff) {
    return siteFor(state, opKey(state, name_outside_ops));
  }
  std::uint32_t site = siteWithStack(state, opKey(state, name_outside_ops), bytes);
  asm volatile("" ::: "memory");
  return site;
}

std::uint32_t SiteTable::currentOpSite(ThreadState& state, std::uint32_t name_outside_ops) {
  return siteFor(state, opKey(state, name_outside_ops));
}

std::uint32_t SiteTable::currentSiteNamed(ThreadState& state, std::uint32_t name) {
  SiteKey key{name, 0, state.scope_path, 0};
  if (state.op_depth > 0) {
    OpFrame& outer = state.ops[0];
    if (outer.name_id == 0) outer.name_id = internString(outer.name);
    key.outer_op = outer.name_id;
  }
  std::uint32_t site = siteWithStack(state, key, 0);
  asm volatile("" ::: "memory");  // no tail call (see currentSite)
  return site;
}

// Captures the stack as the mode asks. Not inlined, so the frames it skips are always the same.
__attribute__((noinline)) std::uint32_t SiteTable::siteWithStack(ThreadState& state, SiteKey key,
                                                                 std::uint64_t bytes) {
  StackTable* stacks = stacks_.load(std::memory_order_acquire);
  StackMode mode = stack_mode_.load(std::memory_order_relaxed);
  std::uint32_t sampled_stack = 0;
  if (mode == StackMode::kPython && stacks != nullptr) {
    CapturedStack captured;
    captured.depth = 0;
    captured.python_stack = capturePythonStack();
    if (captured.python_stack != 0) key.stack = internStack(*stacks, captured);
  } else if (mode != StackMode::kOff && stacks != nullptr) {
    bool capture =
        mode == StackMode::kOn ||
        state.sample_counter++ % stack_sample_every_.load(std::memory_order_relaxed) == 0;
    // Inside a watched op on a step of a loop whose steps vary (op_sampling.h), the last watched
    // step's site at this place serves when op, scope and size match (track/step_sites.h).
    bool reusable = mode == StackMode::kOn && state.op_depth > 0 &&
                    g_session.steps_vary.load(std::memory_order_relaxed);
    std::uint32_t place = StepSites::kNoPlace;
    StepSites::Capture wanted{key.inner_op, key.outer_op, key.scope_path, 0, bytes};
    if (reusable) {
      place = t_step_sites.nextPlace(currentStep(), sessionId());
      if (std::uint32_t site = t_step_sites.siteFor(place, wanted)) return site;
    }
    if (capture) {
      CapturedStack captured;
      captureStack(captured, 4);  // these two, the attribution step, the allocator hook
      std::uint32_t stack_id = internStack(*stacks, captured);
      if (mode == StackMode::kOn) {
        key.stack = stack_id;
      } else {
        sampled_stack = stack_id;
      }
    }
    if (reusable) {
      wanted.site = siteFor(state, key);
      t_step_sites.remember(place, wanted);
      return wanted.site;
    }
  }
  std::uint32_t site_id = siteFor(state, key);
  // Release: a report reading this id on another thread must also see the stack entry it names.
  if (sampled_stack != 0) {
    sites_.at(site_id).example_stack.store(sampled_stack, std::memory_order_release);
  }
  return site_id;
}

}  // namespace memseal::track
