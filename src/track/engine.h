// The process-wide tracking engine: the CPU allocator interposer, the op observer and the tables.
// It lives for the whole process (never destroyed), because tensors allocated while tracking may be
// freed at any time later, even during static destruction, and their deleter lands here.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <c10/core/Allocator.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>

#include "memseal/tracker.h"
#include "track/insert_only_table.h"
#include "track/live_table.h"
#include "track/stack_capture.h"
#include "track/thread_state.h"

namespace torch::autograd {
struct Node;
}
namespace at {
class TensorBase;
}

namespace memseal::track {

struct StringEntry {
  char* text = nullptr;  // owned, never freed (ids stay valid for the process)
  bool matches(const char* key) const { return std::strcmp(text, key) == 0; }
};
using StringTable = InsertOnlyTable<StringEntry, 8192>;

// A MEMSEAL_SCOPE path is a chain: (parent path, name).
struct ScopePathKey {
  std::uint32_t parent;
  std::uint32_t name;
};
struct ScopePathEntry {
  ScopePathKey key{};
  bool matches(const ScopePathKey& k) const { return key.parent == k.parent && key.name == k.name; }
};
using ScopePathTable = InsertOnlyTable<ScopePathEntry, 4096>;

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
  std::atomic<std::int64_t> live_bytes{0};
  std::atomic<std::int64_t> live_count{0};
  std::atomic<std::int64_t> allocated_bytes_total{0};
  std::atomic<std::int64_t> allocations_total{0};
  bool matches(const SiteKey& k) const { return key == k; }
  void resetCounters();
};
using SiteTable = InsertOnlyTable<SiteEntry, 16384>;

struct DeviceCounters {
  std::atomic<std::int64_t> live_bytes{0};
  std::atomic<std::int64_t> live_count{0};
  std::atomic<std::int64_t> peak_bytes{0};
  std::atomic<std::int64_t> allocated_bytes_total{0};
  std::atomic<std::int64_t> allocations_total{0};
  std::atomic<std::int64_t> frees_total{0};
  void reset();
  void onAllocate(std::int64_t bytes);
  void onFree(std::int64_t bytes);
  DeviceStats read(const char* device) const;
};

// Told about every op output that has autograd history; the leak detector uses it to watch graph
// nodes that outlive their step. Called on the thread that ran the op, from inside the op observer.
class GradFnObserver {
 public:
  virtual ~GradFnObserver() = default;
  virtual void onGradFn(const at::TensorBase& output,
                        const std::shared_ptr<torch::autograd::Node>& node, std::uint32_t site) = 0;
};

// Memory a planned arena serves from one of its blocks. Served DataPtrs are simple (context ==
// data, deleter Engine::trackedFree, as raw_allocate requires), and their frees come back here by
// address: no table insert or remove per allocation.
class ServedMemory {
 public:
  virtual ~ServedMemory() = default;
  // Frees `data` if this memory served it; false if `data` is not inside this memory. May delete
  // this object: nothing may touch it after a true return.
  virtual bool releaseServed(void* data) = 0;
};

// A planned-arena region active on a thread: it may serve allocations itself, and sees those the
// system allocator makes inside it (recording wraps them to learn when they are freed).
class ArenaRegion {
 public:
  virtual ~ArenaRegion() = default;
  // Memory for `bytes` (never 0: the interposer handles those) from the plan, or an empty DataPtr
  // to use the system allocator.
  virtual c10::DataPtr serve(std::size_t bytes) = 0;
  virtual c10::DataPtr observe(c10::DataPtr allocation, std::size_t bytes) = 0;
  // A free on this thread while the region runs: true if the region's memory served `data` (it is
  // freed then), without a lock; false sends it on to the other paths.
  virtual bool releaseOnThisThread(void* /*data*/) { return false; }
};

class Engine {
 public:
  static Engine& instance();

  void start(const TrackerOptions& options);
  void stop();
  bool active() const { return active_.load(std::memory_order_acquire); }
  std::uint32_t session() const { return session_.load(std::memory_order_acquire); }

  // Keeps the interposing CPU allocator installed while anyone (tracker, planned arena) needs it.
  void acquireAllocatorHook();
  void releaseAllocatorHook();

  std::uint32_t internString(const char* text);
  const char* string(std::uint32_t id) const;  // "" for 0
  std::uint32_t internScopePath(std::uint32_t parent, const char* name);
  std::string scopePathText(std::uint32_t id) const;
  std::uint32_t gradFnNameId(const torch::autograd::Node& node);

  SiteEntry& site(std::uint32_t id) { return sites_.at(id); }
  SiteTable& sites() { return sites_; }
  // The stack with this id, or nullptr when stacks were never turned on or id is 0.
  const StackEntry* stack(std::uint32_t id) const;
  LiveTable& live() { return live_; }
  DeviceCounters& cpu() { return cpu_; }

  // The step allocations are recorded in; write it through setStep.
  std::atomic<std::uint32_t> step{0};
  // Sets the step and, when ops are watched on one step in N, starts or stops watching them.
  void setStep(std::uint32_t new_step);
  // Backward functions (autograd nodes) executed, ever: tells whether a loop runs backward.
  std::atomic<std::uint64_t> backward_functions{0};
  // Setting nullptr waits until no thread is inside the old observer, so it can be destroyed.
  void setGradFnObserver(GradFnObserver* observer);
  GradFnObserver* gradFnObserver() const {
    return grad_fn_observer_.load(std::memory_order_acquire);
  }

  // Hot path, called by the interposing allocator.
  c10::DataPtr track(c10::DataPtr inner, std::size_t bytes);
  // Makes `inner` a simple DataPtr (context == data, deleter trackedFree), remembering its real
  // context and deleter, so raw_allocate/raw_deallocate work for everything the interposer returns.
  c10::DataPtr adopt(c10::DataPtr inner);
  static void trackedFree(void* data);
  // Memory [begin, begin + bytes) served by `owner`: frees of pointers inside it, from any thread
  // and after any region, reach owner->releaseServed. Registered before serving, unregistered
  // before the memory goes back to the system.
  void registerServedMemory(const void* begin, std::size_t bytes, ServedMemory* owner);
  void unregisterServedMemory(const void* begin);
  // Op observer hooks.
  // An output of an op that just returned: fills in the signature of storage the op allocated, and
  // tells the grad_fn observer about autograd history when `grad_site` is not 0.
  void onOpOutput(const at::TensorBase& tensor, std::uint64_t start_serial,
                  std::uint32_t grad_site);
  // The site an allocation made now would get (interns as needed); outside any watched op its op
  // is the string `name_outside_ops` (0: none).
  std::uint32_t currentSite(std::uint32_t name_outside_ops = 0);

  // Reads the tensor's current metadata into a signature (used at op end and during analysis).
  TensorSignature signatureOf(const at::TensorBase& tensor);

 private:
  Engine();
  void acquireAllocatorHookLocked();  // with control_mutex_ held
  void releaseAllocatorHookLocked();
  std::uint32_t siteFor(const SiteKey& key);
  // With control_mutex_ held: adds or removes the RecordFunction callback.
  void watchOpsLocked(bool watch);
  // Ops watched on one step in N: the site and signature of an allocation made on a step where
  // they may not be watched.
  void attributeBySequence(ThreadState& state, LiveRecord& record, std::uint32_t every);
  void recordOutputInSequence(ThreadState& state, const LiveRecord& record,
                              const TensorSignature& signature);
  bool releaseServedAnywhere(void* data);

  std::atomic<bool> active_{false};
  std::atomic<std::uint32_t> session_{0};
  std::mutex control_mutex_;
  int hook_users_ = 0;
  bool hook_installed_with_high_priority_ = false;
  std::uint64_t record_function_handle_ = 0;
  bool ops_need_outputs_ = false;
  // 0: ops not watched; 1: on every step; N: on the steps that are multiples of N.
  std::atomic<std::uint32_t> observe_ops_every_{0};
  std::uint32_t unwatched_op_name_ = 0;  // "<op not watched on this step>", interned at start

  DeviceCounters cpu_;
  LiveTable live_;
  LiveTable adopted_;  // data -> real context and deleter of adopted DataPtrs (arena recordings)
  // Registered served memory: begin -> (end, owner). Only frees from other threads or after the
  // region ended look here; blocks come and go with plans, rarely.
  std::mutex served_mutex_;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, ServedMemory*>> served_memory_;
  std::atomic<std::size_t> served_memory_count_{0};
  StringTable strings_;
  ScopePathTable scope_paths_;
  SiteTable sites_;
  std::uint32_t overflow_site_ = 0;
  std::atomic<StackTable*> stacks_{nullptr};
  struct TypeNameEntry {
    const void* type = nullptr;
    std::uint32_t name = 0;
    bool matches(const void* key) const { return type == key; }
  };
  InsertOnlyTable<TypeNameEntry, 2048> grad_fn_names_;
  std::atomic<GradFnObserver*> grad_fn_observer_{nullptr};
  std::atomic<std::int64_t> grad_fn_observer_calls_{0};
  // The options the hot path reads, as atomics: start() may run while other threads allocate.
  std::atomic<StackMode> stack_mode_{StackMode::kOff};
  std::atomic<std::uint32_t> stack_sample_every_{1};
  std::atomic<std::uint32_t> next_thread_slot_{0};
};

// Takes and drops the tracker's weak reference on a tensor, and turns it into a strong one.
void takeWeakTensorReference(c10::TensorImpl* tensor);
void dropWeakTensorReference(c10::TensorImpl* tensor);
// Null (undefined) when the tensor is gone.
c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> lockWeakTensorReference(
    c10::TensorImpl* tensor);

}  // namespace memseal::track
