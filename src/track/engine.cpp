// The tracker's hot path. Order on every allocation, as in heaptrack: enabled flag, recursion
// guard, capture into fixed buffers, and only then shared state (atomics, one sharded lock).
// Nothing here allocates through the allocator being tracked; tables grow with calloc, rarely.
#include "track/engine.h"

#include <ATen/core/TensorBase.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <thread>
#include <typeinfo>

#include "track/allocation_sequence.h"
#include "track/hashing.h"
#include "track/thread_state.h"

namespace memseal::track {

namespace {

thread_local ThreadState t_thread_state{};
// Only touched when ops are watched on one step in N; freed when the thread exits.
thread_local AllocationSequence t_sequence;

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Forwards to whatever CPU allocator was installed before, and records what it hands out while
// the engine is active.
class InterposingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    ThreadState& state = t_thread_state;
    c10::Allocator* system = previous.load(std::memory_order_acquire);
    // Zero-byte requests get no memory (libtorch's allocator returns a null pointer): not an
    // allocation to count, track, record or plan.
    if (bytes == 0) return system->allocate(0);
    ArenaRegion* region = state.in_tracker ? nullptr : state.arena_region;
    if (region != nullptr) {
      // From a planned block (already a simple DataPtr): neither a system allocator call nor
      // tracked.
      c10::DataPtr served = region->serve(bytes);
      if (served) return served;
    }
    ++state.system_allocations;
    c10::DataPtr inner = system->allocate(bytes);
    Engine& engine = Engine::instance();
    if (region != nullptr) inner = engine.adopt(region->observe(std::move(inner), bytes));
    if (!engine.active()) return inner;
    return engine.track(std::move(inner), bytes);
  }
  // raw_allocate/raw_deallocate work: tracked pointers carry data == context, and trackedFree
  // hands pointers it does not know to the previous allocator's raw deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &Engine::trackedFree; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  std::atomic<c10::Allocator*> previous{nullptr};
};

InterposingCpuAllocator& interposer() {
  static auto* allocator = new InterposingCpuAllocator();  // never destroyed, see engine.h
  return *allocator;
}

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn) {
  ThreadState& state = t_thread_state;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    Engine::instance().backward_functions.fetch_add(1, std::memory_order_relaxed);
  }
  if (state.op_depth < kMaxOpDepth) {
    state.ops[state.op_depth] = OpFrame{fn.name(), state.allocation_serial, 0};
  }
  ++state.op_depth;
  return nullptr;
}

void visitTensors(const c10::IValue& value, Engine& engine, std::uint64_t start_serial,
                  std::uint32_t grad_site) {
  if (value.isTensor()) {
    engine.onOpOutput(value.toTensor(), start_serial, grad_site);
  } else if (value.isTensorList()) {
    for (const at::Tensor& element : value.toTensorList()) {
      engine.onOpOutput(element, start_serial, grad_site);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      if (element.isTensor()) engine.onOpOutput(element.toTensor(), start_serial, grad_site);
    }
  }
}

void onOpEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState& state = t_thread_state;
  if (state.op_depth == 0) return;  // the op started before the observer was installed
  --state.op_depth;
  if (state.op_depth >= static_cast<std::uint32_t>(kMaxOpDepth)) return;
  Engine& engine = Engine::instance();
  if (!engine.active() || state.in_tracker) return;
  const OpFrame& frame = state.ops[state.op_depth];
  bool allocated_inside = state.allocation_serial != frame.start_serial;
  bool watch_grad_fns = engine.gradFnObserver() != nullptr && c10::GradMode::is_enabled() &&
                        fn.scope() != at::RecordScope::BACKWARD_FUNCTION;
  if (!allocated_inside && !watch_grad_fns) return;
  if (!fn.needsOutputs()) return;
  state.in_tracker = true;
  try {
    std::uint32_t grad_site = 0;
    if (watch_grad_fns) {
      // The site is that of this op: intern it while its frame is still on the stack.
      ++state.op_depth;
      grad_site = engine.currentSite();
      --state.op_depth;
    }
    for (const c10::IValue& output : fn.outputs()) {
      visitTensors(output, engine, frame.start_serial, grad_site);
    }
  } catch (...) {
    // Metadata is best effort: a tensor kind whose storage cannot be read keeps no signature.
  }
  state.in_tracker = false;
}

}  // namespace

ThreadState& threadState() { return t_thread_state; }

void takeWeakTensorReference(c10::TensorImpl* tensor) {
  c10::raw::weak_intrusive_ptr::incref(tensor);
}

void dropWeakTensorReference(c10::TensorImpl* tensor) {
  c10::weak_intrusive_ptr<c10::TensorImpl>::reclaim(tensor);  // its destructor drops the reference
}

c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> lockWeakTensorReference(
    c10::TensorImpl* tensor) {
  auto weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(tensor);
  auto strong = weak.lock();
  weak.release();  // the record keeps its weak reference
  return strong;
}

void SiteEntry::resetCounters() {
  live_bytes.store(0, std::memory_order_relaxed);
  live_count.store(0, std::memory_order_relaxed);
  allocated_bytes_total.store(0, std::memory_order_relaxed);
  allocations_total.store(0, std::memory_order_relaxed);
}

void DeviceCounters::reset() {
  live_bytes.store(0);
  live_count.store(0);
  peak_bytes.store(0);
  allocated_bytes_total.store(0);
  allocations_total.store(0);
  frees_total.store(0);
}

void DeviceCounters::onAllocate(std::int64_t bytes) {
  std::int64_t live = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  live_count.fetch_add(1, std::memory_order_relaxed);
  allocated_bytes_total.fetch_add(bytes, std::memory_order_relaxed);
  allocations_total.fetch_add(1, std::memory_order_relaxed);
  std::int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void DeviceCounters::onFree(std::int64_t bytes) {
  live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  live_count.fetch_sub(1, std::memory_order_relaxed);
  frees_total.fetch_add(1, std::memory_order_relaxed);
}

DeviceStats DeviceCounters::read(const char* device) const {
  DeviceStats stats;
  stats.device = device;
  stats.live_bytes = live_bytes.load();
  stats.live_count = live_count.load();
  stats.peak_bytes = peak_bytes.load();
  stats.allocated_bytes_total = allocated_bytes_total.load();
  stats.allocations_total = allocations_total.load();
  stats.frees_total = frees_total.load();
  return stats;
}

Engine& Engine::instance() {
  static Engine* engine = new Engine();  // never destroyed, see engine.h
  return *engine;
}

Engine::Engine() {
  SiteKey overflow{UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
  overflow_site_ = sites_.findOrInsert(mixBits(UINT32_MAX), overflow,
                                       [&](SiteEntry& entry) { entry.key = overflow; });
}

void Engine::acquireAllocatorHook() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  acquireAllocatorHookLocked();
}

void Engine::releaseAllocatorHook() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  releaseAllocatorHookLocked();
}

void Engine::acquireAllocatorHookLocked() {
  if (hook_users_++ > 0) return;
  InterposingCpuAllocator& hook = interposer();
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current == &hook) return;
  hook.previous.store(current, std::memory_order_release);
  c10::SetCPUAllocator(&hook, 0);
  hook_installed_with_high_priority_ = false;
  if (c10::GetCPUAllocator() != &hook) {
    // Someone registered theirs with a priority above the default; we still wrap it.
    c10::SetCPUAllocator(&hook, UINT8_MAX);
    hook_installed_with_high_priority_ = true;
  }
}

void Engine::releaseAllocatorHookLocked() {
  if (hook_users_ == 0 || --hook_users_ > 0) return;
  InterposingCpuAllocator& hook = interposer();
  // Restore only if nobody replaced us meanwhile; `previous` stays set so late frees still work.
  if (c10::GetCPUAllocator() == &hook) {
    c10::SetCPUAllocator(hook.previous.load(), hook_installed_with_high_priority_ ? UINT8_MAX : 0);
  }
}

void Engine::start(const TrackerOptions& options) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (active()) {
    throw std::logic_error("memseal: a tracker is already running in this process; stop it first");
  }
  if (options.stacks == StackMode::kSampled && options.stack_sample_every == 0) {
    throw std::invalid_argument("memseal: stack_sample_every must be at least 1");
  }
  if (options.observe_ops_every == 0) {
    throw std::invalid_argument("memseal: observe_ops_every must be at least 1 (1: every step)");
  }
  if (options.observe_ops_every > 1 && !options.observe_ops) {
    throw std::invalid_argument(
        "memseal: observe_ops_every > 1 needs observe_ops (ops are not watched at all)");
  }
  stack_sample_every_.store(std::max<std::uint32_t>(1, options.stack_sample_every));
  stack_mode_.store(options.stacks);
  if (options.stacks != StackMode::kOff && stacks_.load() == nullptr) {
    stacks_.store(new StackTable());  // kept for the process: stack ids stay valid in reports
    warmUpStackCapture();
  }
  session_.fetch_add(1, std::memory_order_acq_rel);
  cpu_.reset();
  sites_.forEach([](std::uint32_t, SiteEntry& entry) { entry.resetCounters(); });
  acquireAllocatorHookLocked();
  ops_need_outputs_ = options.record_tensor_metadata;
  std::uint32_t every = options.observe_ops ? options.observe_ops_every : 0;
  if (every > 1 && unwatched_op_name_ == 0) {
    unwatched_op_name_ = internString("<op not watched on this step>");
  }
  observe_ops_every_.store(every, std::memory_order_relaxed);
  if (every != 0) watchOpsLocked(step.load(std::memory_order_relaxed) % every == 0);
  active_.store(true, std::memory_order_release);
}

void Engine::stop() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!active()) return;
  active_.store(false, std::memory_order_release);
  watchOpsLocked(false);
  observe_ops_every_.store(0, std::memory_order_relaxed);
  releaseAllocatorHookLocked();
}

void Engine::watchOpsLocked(bool watch) {
  if (watch && record_function_handle_ == 0) {
    auto callback =
        at::RecordFunctionCallback(&onOpStart, &track::onOpEnd).needsOutputs(ops_need_outputs_);
    record_function_handle_ = at::addGlobalCallback(callback);
  } else if (!watch && record_function_handle_ != 0) {
    // Ops already running keep their callbacks (RecordFunction copies them when an op starts), so
    // every onOpStart still gets its onOpEnd.
    at::removeCallback(record_function_handle_);
    record_function_handle_ = 0;
  }
}

void Engine::setStep(std::uint32_t new_step) {
  step.store(new_step, std::memory_order_relaxed);
  std::uint32_t every = observe_ops_every_.load(std::memory_order_relaxed);
  if (every <= 1) return;
  std::lock_guard<std::mutex> lock(control_mutex_);
  every = observe_ops_every_.load(std::memory_order_relaxed);  // stop() may have run meanwhile
  if (every > 1) watchOpsLocked(new_step % every == 0);
}

void Engine::setGradFnObserver(GradFnObserver* observer) {
  grad_fn_observer_.store(observer, std::memory_order_seq_cst);
  if (observer != nullptr) return;
  // A thread that loaded the old observer may still be inside it: wait it out.
  while (grad_fn_observer_calls_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

std::uint32_t Engine::internString(const char* text) {
  if (text == nullptr) return 0;
  return strings_.findOrInsert(hashString(text), text, [&](StringEntry& entry) {
    std::size_t length = std::strlen(text);
    entry.text = static_cast<char*>(std::malloc(length + 1));
    if (entry.text != nullptr) std::memcpy(entry.text, text, length + 1);
  });
}

const char* Engine::string(std::uint32_t id) const {
  if (id == 0) return "";
  const char* text = strings_.at(id).text;
  return text != nullptr ? text : "";
}

std::uint32_t Engine::internScopePath(std::uint32_t parent, const char* name) {
  ScopePathKey key{parent, internString(name)};
  return scope_paths_.findOrInsert(combineHash(key.parent, key.name), key,
                                   [&](ScopePathEntry& entry) { entry.key = key; });
}

std::string Engine::scopePathText(std::uint32_t id) const {
  std::string path;
  while (id != 0) {
    const ScopePathEntry& entry = scope_paths_.at(id);
    std::string name = string(entry.key.name);
    path = path.empty() ? name : name + "/" + path;
    id = entry.key.parent;
  }
  return path;
}

std::uint32_t Engine::gradFnNameId(const torch::autograd::Node& node) {
  const void* type = &typeid(node);
  std::uint32_t found = grad_fn_names_.find(mixBits(reinterpret_cast<std::uintptr_t>(type)), type);
  if (found != 0) return grad_fn_names_.at(found).name;
  // First time this node type is seen: name() builds a std::string, once per type.
  std::uint32_t name = internString(node.name().c_str());
  std::uint32_t id = grad_fn_names_.findOrInsert(mixBits(reinterpret_cast<std::uintptr_t>(type)),
                                                 type, [&](TypeNameEntry& entry) {
                                                   entry.type = type;
                                                   entry.name = name;
                                                 });
  return id != 0 ? grad_fn_names_.at(id).name : name;
}

const StackEntry* Engine::stack(std::uint32_t id) const {
  StackTable* table = stacks_.load(std::memory_order_acquire);
  if (table == nullptr || id == 0) return nullptr;
  return &table->at(id);
}

std::uint32_t Engine::siteFor(const SiteKey& key) {
  std::uint64_t hash =
      combineHash(combineHash(key.inner_op, key.outer_op), combineHash(key.scope_path, key.stack));
  std::uint32_t id = sites_.findOrInsert(hash, key, [&](SiteEntry& entry) { entry.key = key; });
  return id != 0 ? id : overflow_site_;
}

std::uint32_t Engine::currentSite(std::uint32_t name_outside_ops) {
  ThreadState& state = t_thread_state;
  SiteKey key{name_outside_ops, 0, state.scope_path, 0};
  std::uint32_t depth = state.op_depth < static_cast<std::uint32_t>(kMaxOpDepth)
                            ? state.op_depth
                            : static_cast<std::uint32_t>(kMaxOpDepth);
  if (depth > 0) {
    OpFrame& inner = state.ops[depth - 1];
    if (inner.name_id == 0) inner.name_id = internString(inner.name);
    OpFrame& outer = state.ops[0];
    if (outer.name_id == 0) outer.name_id = internString(outer.name);
    key.inner_op = inner.name_id;
    key.outer_op = outer.name_id;
  }
  StackTable* stacks = stacks_.load(std::memory_order_acquire);
  StackMode mode = stack_mode_.load(std::memory_order_relaxed);
  std::uint32_t sampled_stack = 0;
  if (mode != StackMode::kOff && stacks != nullptr) {
    bool capture =
        mode == StackMode::kOn ||
        state.sample_counter++ % stack_sample_every_.load(std::memory_order_relaxed) == 0;
    if (capture) {
      CapturedStack captured;
      captureStack(captured, 3);  // currentSite, track/onOpEnd, the allocator
      std::uint32_t stack_id = internStack(*stacks, captured);
      if (mode == StackMode::kOn) {
        key.stack = stack_id;
      } else {
        sampled_stack = stack_id;
      }
    }
  }
  std::uint32_t site_id = siteFor(key);
  // Release: a report reading this id on another thread must also see the stack entry it names.
  if (sampled_stack != 0)
    sites_.at(site_id).example_stack.store(sampled_stack, std::memory_order_release);
  return site_id;
}

c10::DataPtr Engine::track(c10::DataPtr inner, std::size_t bytes) {
  ThreadState& state = t_thread_state;
  void* data = inner.get();
  if (state.in_tracker || data == nullptr) return inner;
  state.in_tracker = true;
  if (state.slot == 0) state.slot = next_thread_slot_.fetch_add(1, std::memory_order_relaxed) + 1;

  LiveRecord record;
  record.data = data;
  record.original_deleter = inner.get_deleter();
  record.original_context = inner.get_context();
  record.bytes = bytes;
  record.time_ns = nowNs();
  record.thread_slot = state.slot;
  record.thread_serial = ++state.allocation_serial;
  record.step = step.load(std::memory_order_relaxed);
  record.session = session();
  record.lifetime_scope = state.lifetime_scope;
  record.flags = static_cast<std::uint8_t>((c10::GradMode::is_enabled() ? kGradMode : 0) |
                                           (c10::InferenceMode::is_enabled() ? kInferenceMode : 0));
  std::uint32_t watch_every = observe_ops_every_.load(std::memory_order_relaxed);
  if (watch_every > 1) {
    attributeBySequence(state, record, watch_every);
  } else {
    record.site = currentSite();
  }
  c10::Device device = inner.device();
  if (!live_.insert(record)) {
    state.in_tracker = false;
    return inner;  // could not grow the table: this allocation goes untracked, still correct
  }
  inner.release_context();
  ++state.allocations_in_thread;
  state.bytes_in_thread += bytes;
  cpu_.onAllocate(static_cast<std::int64_t>(record.bytes));
  SiteEntry& entry = sites_.at(record.site);
  entry.live_bytes.fetch_add(static_cast<std::int64_t>(record.bytes), std::memory_order_relaxed);
  entry.live_count.fetch_add(1, std::memory_order_relaxed);
  entry.allocated_bytes_total.fetch_add(static_cast<std::int64_t>(record.bytes),
                                        std::memory_order_relaxed);
  entry.allocations_total.fetch_add(1, std::memory_order_relaxed);
  state.in_tracker = false;
  return c10::DataPtr(data, data, &Engine::trackedFree, device);
}

void Engine::attributeBySequence(ThreadState& state, LiveRecord& record, std::uint32_t every) {
  if (state.sequence_step != record.step || state.sequence_session != record.session) {
    // This thread's first allocation in a new step.
    if (state.sequence_session != record.session) t_sequence.clear();  // another tracker's
    state.sequence_step = record.step;
    state.sequence_session = record.session;
    state.sequence_first_serial = record.thread_serial;
    state.sequence_recording = record.step % every == 0;
    state.sequence_diverged = false;
    if (state.sequence_recording) t_sequence.clear();
  }
  std::uint64_t index = record.thread_serial - state.sequence_first_serial;
  if (state.sequence_recording) {
    record.site = currentSite();
    // Appended only in order: after an entry that did not fit, indexes would no longer line up.
    if (index == t_sequence.size()) {
      t_sequence.append(SequenceEntry{record.bytes, record.site, state.scope_path, {}});
    }
    return;
  }
  const SequenceEntry* recorded = state.sequence_diverged ? nullptr : t_sequence.at(index);
  if (recorded != nullptr && recorded->bytes == record.bytes &&
      recorded->scope_path == state.scope_path) {
    record.site = recorded->site;
    record.signature = recorded->signature;
    return;
  }
  // Another allocation than on the watched step: later ones of this step would be guesses.
  state.sequence_diverged = true;
  record.site = currentSite(unwatched_op_name_);
}

void Engine::recordOutputInSequence(ThreadState& state, const LiveRecord& record,
                                    const TensorSignature& signature) {
  if (!state.sequence_recording || record.step != state.sequence_step ||
      record.session != state.sequence_session) {
    return;
  }
  SequenceEntry* entry = t_sequence.at(record.thread_serial - state.sequence_first_serial);
  if (entry != nullptr) entry->signature = signature;
}

c10::DataPtr Engine::adopt(c10::DataPtr inner) {
  void* data = inner.get();
  // Already simple: the system allocator's own DataPtr (raw_deallocate reaches its raw deleter
  // through trackedFree's fallback), or one of ours.
  if (data == nullptr || inner.get_context() == data) return inner;
  LiveRecord record;
  record.data = data;
  record.original_context = inner.get_context();
  record.original_deleter = inner.get_deleter();
  ThreadState& state = t_thread_state;
  bool was_in_tracker = state.in_tracker;
  state.in_tracker = true;
  bool inserted = adopted_.insert(record);
  state.in_tracker = was_in_tracker;
  if (!inserted) return inner;
  c10::Device device = inner.device();
  inner.release_context();
  return c10::DataPtr(data, data, &Engine::trackedFree, device);
}

void Engine::trackedFree(void* data) {
  if (data == nullptr) return;  // raw_deallocate(nullptr), as oneDNN does for empty buffers
  // Planned-arena memory freed inside its region, the common case: no lock, no table.
  if (ArenaRegion* region = t_thread_state.arena_region) {
    if (region->releaseOnThisThread(data)) return;
  }
  Engine& engine = instance();
  LiveRecord record;
  if (!engine.live_.remove(data, &record)) {
    if (engine.adopted_.remove(data, &record)) {
      record.original_deleter(record.original_context);
      return;
    }
    if (engine.releaseServedAnywhere(data)) return;
    // Only raw_deallocate of memory we never tracked gets here.
    c10::Allocator* system = interposer().previous.load(std::memory_order_acquire);
    c10::DeleterFnPtr previous = system != nullptr ? system->raw_deleter() : nullptr;
    if (previous != nullptr) {
      previous(data);
    } else {
      std::fprintf(stderr, "memseal: free of unknown pointer %p; leaking it rather than guessing\n",
                   data);
    }
    return;
  }
  if (record.session == engine.session()) {
    engine.cpu_.onFree(static_cast<std::int64_t>(record.bytes));
    SiteEntry& entry = engine.sites_.at(record.site);
    entry.live_bytes.fetch_sub(static_cast<std::int64_t>(record.bytes), std::memory_order_relaxed);
    entry.live_count.fetch_sub(1, std::memory_order_relaxed);
  }
  if (record.tensor != nullptr) dropWeakTensorReference(record.tensor);
  record.original_deleter(record.original_context);
}

void Engine::registerServedMemory(const void* begin, std::size_t bytes, ServedMemory* owner) {
  auto start = reinterpret_cast<std::uintptr_t>(begin);
  std::lock_guard<std::mutex> lock(served_mutex_);
  served_memory_[start] = {start + bytes, owner};
  served_memory_count_.store(served_memory_.size(), std::memory_order_release);
}

void Engine::unregisterServedMemory(const void* begin) {
  std::lock_guard<std::mutex> lock(served_mutex_);
  served_memory_.erase(reinterpret_cast<std::uintptr_t>(begin));
  served_memory_count_.store(served_memory_.size(), std::memory_order_release);
}

bool Engine::releaseServedAnywhere(void* data) {
  if (served_memory_count_.load(std::memory_order_acquire) == 0) return false;
  auto address = reinterpret_cast<std::uintptr_t>(data);
  ServedMemory* owner = nullptr;
  {
    std::lock_guard<std::mutex> lock(served_mutex_);
    auto after = served_memory_.upper_bound(address);
    if (after == served_memory_.begin()) return false;
    auto found = std::prev(after);
    if (address >= found->second.first) return false;
    owner = found->second.second;
  }
  // Outside the lock: releasing the last served tensor deletes the owner, which unregisters. The
  // owner is alive here because `data`, served by it and not yet freed, holds a reference to it.
  return owner->releaseServed(data);
}

TensorSignature Engine::signatureOf(const at::TensorBase& tensor) {
  TensorSignature signature;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  c10::IntArrayRef sizes = impl->sizes();
  signature.dims = static_cast<std::int8_t>(sizes.size() > 127 ? 127 : sizes.size());
  for (std::size_t i = 0; i < sizes.size() && i < static_cast<std::size_t>(kMaxCachedDims); ++i) {
    signature.sizes[i] = sizes[i];
  }
  signature.scalar_type = static_cast<std::int8_t>(c10::typeMetaToScalarType(impl->dtype()));
  signature.requires_grad = impl->requires_grad();
  const std::shared_ptr<torch::autograd::Node>& grad_fn = tensor.grad_fn();
  signature.is_leaf = grad_fn == nullptr;
  if (grad_fn != nullptr) signature.grad_fn_name = gradFnNameId(*grad_fn);
  return signature;
}

void Engine::onOpOutput(const at::TensorBase& tensor, std::uint64_t start_serial,
                        std::uint32_t grad_site) {
  if (!tensor.defined()) return;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  ThreadState& state = t_thread_state;
  if (state.allocation_serial != start_serial && impl->has_storage() &&
      impl->device_type() == c10::DeviceType::CPU) {
    const c10::DataPtr& data_ptr = impl->storage().data_ptr();
    if (data_ptr.get_deleter() == &Engine::trackedFree) {
      TensorSignature signature = signatureOf(tensor);
      c10::TensorImpl* displaced = nullptr;
      std::uint32_t slot = state.slot;
      bool in_sequence = observe_ops_every_.load(std::memory_order_relaxed) > 1;
      live_.update(data_ptr.get(), [&](LiveRecord& record) {
        // Only storage this op allocated on this thread: views of older tensors keep theirs.
        if (record.thread_slot != slot || record.thread_serial <= start_serial) return;
        record.signature = signature;
        if (in_sequence) recordOutputInSequence(state, record, signature);
        if (record.tensor != impl) {
          displaced = record.tensor;
          takeWeakTensorReference(impl);
          record.tensor = impl;
        }
      });
      // Dropped outside the shard lock: the last weak reference may destroy the old TensorImpl.
      if (displaced != nullptr) dropWeakTensorReference(displaced);
    }
  }
  if (grad_site != 0) {
    const std::shared_ptr<torch::autograd::Node>& grad_fn = tensor.grad_fn();
    if (grad_fn != nullptr) {
      // Counted before the observer is loaded, so setGradFnObserver(nullptr) can wait for us.
      grad_fn_observer_calls_.fetch_add(1, std::memory_order_seq_cst);
      GradFnObserver* observer = grad_fn_observer_.load(std::memory_order_seq_cst);
      if (observer != nullptr) observer->onGradFn(tensor, grad_fn, grad_site);
      grad_fn_observer_calls_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
}

}  // namespace memseal::track
