// explainPeak: warm-up steps, then each measured step between a snapshot of what is live and a
// trace of its allocations and frees, with backward watched for the tensors it saved and the
// gradients it left. The highest step peak is described; roles come from identity only.
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "analyze/live_view.h"
#include "analyze/step_peak.h"
#include "explain/backward_roles.h"
#include "explain/device_peak.h"
#include "explain/device_step_watch.h"
#include "explain/peak_remedies.h"
#include "memseal/explain.h"
#include "track/device_events.h"
#include "track/event_trace.h"
#include "track/grad_fn_observer.h"
#include "track/tensor_reference.h"
#include "track/thread_state.h"

namespace memseal {

namespace {

constexpr std::size_t kMaxListed = 32;

// What the caller named, kept as storage only: holding the tensors across the step would keep
// alive what the step frees (last step's .grad, which zero_grad drops).
struct Named {
  MemoryRole role = MemoryRole::kOther;
  std::int64_t bytes = 0;
  track::TensorSignature signature;
  std::string module;      // the module that owns it, where the caller said
  bool on_device = false;  // a CUDA tensor: its storage is a caching allocator's block
};
using StorageRoles = std::unordered_map<const void*, Named>;

// Keeps the first role given to a storage: callers add the stronger identities first.
void addRoles(StorageRoles& roles, const std::vector<at::Tensor>& tensors, MemoryRole role,
              const std::vector<std::string>& modules) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& tensor = tensors[i];
    const bool on_device = tensor.defined() && tensor.device().is_cuda();
    const void* storage = on_device ? analyze::storageOf(tensor) : analyze::cpuStorageOf(tensor);
    if (storage == nullptr || roles.count(storage) != 0) continue;
    roles.emplace(storage, Named{role, static_cast<std::int64_t>(tensor.storage().nbytes()),
                                 track::signatureOf(tensor),
                                 i < modules.size() ? modules[i] : std::string(), on_device});
  }
}

// Stronger identities first: parameters, then gradients, then optimizer state.
StorageRoles namedStorage(const std::function<RoleTensors()>& source) {
  StorageRoles roles;
  if (!source) return roles;
  RoleTensors named = source();
  addRoles(roles, named.parameters, MemoryRole::kParameters, named.parameter_modules);
  addRoles(roles, named.gradients, MemoryRole::kGradients, named.gradient_modules);
  addRoles(roles, named.optimizer_state, MemoryRole::kOptimizerState,
           named.optimizer_state_modules);
  return roles;
}

// Everything a measured step leaves for the analysis.
struct MeasuredStep {
  std::uint32_t step = 0;
  analyze::StepPeakResult peak;
  StorageRoles before;  // named before the step: for allocations live when it began
  StorageRoles after;   // named after it: for allocations live when it ended
  explain::BackwardRoles::SeenStorage leaves, gradients, saved;
  std::unordered_map<const void*, track::TensorSignature> end_signatures;
  bool backward_ran = false;
  bool named_model = false;
  bool named_optimizer = false;
  std::uint64_t dropped_events = 0;
  std::vector<DevicePeak> devices;  // each CUDA device's highest moment in the step
};

// Tensors made before tracking began (a model built before explain ran) are in no record, yet they
// are live throughout the step: the named ones alive before and after it, and the leaves backward
// reached, join what was live when the step began, unless the step itself allocated or freed their
// storage.
void addUntrackedStorage(std::vector<track::LiveRecord>& baseline,
                         const std::vector<track::TraceEvent>& events, const StorageRoles& before,
                         const StorageRoles& after,
                         const explain::BackwardRoles::SeenStorage& leaves) {
  std::unordered_set<const void*> known;
  for (const track::LiveRecord& record : baseline) known.insert(record.data);
  for (const track::TraceEvent& event : events) known.insert(event.data);
  auto add = [&](const void* storage, std::int64_t bytes, const track::TensorSignature* signature) {
    if (storage == nullptr || bytes <= 0 || !known.insert(storage).second) return;
    track::LiveRecord record;
    record.data = const_cast<void*>(storage);
    record.bytes = static_cast<std::size_t>(bytes);
    record.site = 0;
    if (signature != nullptr) record.signature = *signature;
    baseline.push_back(record);
  };
  for (const auto& [storage, named] : before) {
    if (!named.on_device && after.count(storage) != 0) add(storage, named.bytes, &named.signature);
  }
  for (const auto& [storage, seen] : leaves) add(storage, seen.bytes, nullptr);
}

// Whether the allocation live at the peak is the one that held `seen`'s storage when backward
// looked at it: made before that moment, and not freed before it.
bool heldWhenSeen(const analyze::PeakAllocation& allocation,
                  const explain::BackwardRoles::SeenStorage& seen_storage) {
  auto found = seen_storage.find(allocation.data);
  if (found == seen_storage.end()) return false;
  for (std::int64_t at : found->second.at_events) {
    if (allocation.made_at < at && (allocation.freed_at < 0 || allocation.freed_at >= at)) {
      return true;
    }
  }
  return false;
}

using explain::DeviceNamed;

// Device addresses of what the caller named (CUDA tensors only) and of what backward saw.
explain::DeviceAddressRoles deviceAddressRoles(const MeasuredStep& measured,
                                               const explain::BackwardRoles& backward) {
  auto address = [](const void* storage) { return reinterpret_cast<std::uint64_t>(storage); };
  explain::DeviceAddressRoles roles;
  for (const auto& [storage, named] : measured.before) {
    if (named.on_device)
      roles.before.emplace(address(storage), DeviceNamed{named.role, named.module});
  }
  for (const auto& [storage, named] : measured.after) {
    if (named.on_device)
      roles.after.emplace(address(storage), DeviceNamed{named.role, named.module});
  }
  for (const void* storage : backward.deviceLeaves()) roles.leaves.insert(address(storage));
  for (const auto& [storage, seen] : measured.gradients) roles.gradients.insert(address(storage));
  for (const auto& [storage, seen] : measured.saved) roles.saved.insert(address(storage));
  return roles;
}

std::pair<std::string, std::string> deviceSiteOpAndScope(std::uint32_t site) {
  track::DeviceSiteName name = track::deviceSiteName(site);
  return {std::move(name.op), std::move(name.scope)};
}

MeasuredStep measureStep(const std::function<void(int)>& step, std::uint32_t index,
                         const ExplainOptions& options, explain::BackwardRoles& backward) {
  MeasuredStep measured;
  measured.step = index;
  StorageRoles before = namedStorage(options.roles);
  std::vector<track::LiveRecord> baseline;
  {
    track::TrackerWork work;
    analyze::forEachLiveRecord(
        [&](const track::LiveRecord& record) { baseline.push_back(record); });
  }
  backward.clear();
  explain::DeviceStepWatch devices(index, options.max_events_per_step);
  track::setBackwardObserver(&backward);
  if (!track::startEventTrace(options.max_events_per_step)) {
    track::setBackwardObserver(nullptr);
    throw std::logic_error("memseal explain: an allocation trace runs already");
  }
  try {
    step(static_cast<int>(index));
  } catch (...) {
    track::stopEventTrace();
    track::setBackwardObserver(nullptr);
    throw;
  }
  track::TraceContents trace = track::stopEventTrace();
  track::setBackwardObserver(nullptr);
  measured.dropped_events = trace.dropped;
  StorageRoles after = namedStorage(options.roles);

  track::TrackerWork work;
  measured.leaves = backward.leaves();
  measured.gradients = backward.gradients();
  measured.saved = backward.saved();
  // Backward saw trace positions; the analysis indexes the events the ring kept.
  for (auto* seen_storage : {&measured.leaves, &measured.gradients, &measured.saved}) {
    for (auto& [storage, seen] : *seen_storage) {
      for (std::int64_t& at : seen.at_events) at -= static_cast<std::int64_t>(trace.first_position);
    }
  }
  addUntrackedStorage(baseline, trace.events, before, after, measured.leaves);
  measured.peak = analyze::replayStepPeak(baseline, trace.events);
  auto hasRole = [](const StorageRoles& roles, MemoryRole role) {
    for (const auto& [storage, named] : roles) {
      if (named.role == role) return true;
    }
    return false;
  };
  measured.named_model =
      hasRole(before, MemoryRole::kParameters) || hasRole(after, MemoryRole::kParameters);
  measured.named_optimizer =
      hasRole(before, MemoryRole::kOptimizerState) || hasRole(after, MemoryRole::kOptimizerState);
  measured.before = std::move(before);
  measured.after = std::move(after);
  analyze::forEachLiveRecord([&](const track::LiveRecord& record) {
    if (record.signature.dims >= 0) measured.end_signatures.emplace(record.data, record.signature);
  });
  measured.backward_ran = backward.backwardRan();
  const explain::DeviceAddressRoles device_roles = deviceAddressRoles(measured, backward);
  for (const explain::DeviceStepEvents& device : devices.stop()) {
    measured.devices.push_back(explain::deviceStepPeak(device, device_roles, deviceSiteOpAndScope));
  }
  return measured;
}

// What the caller named the allocation's storage as: by identity only, and only for the
// allocation that held the storage when it was named (an address freed and reused within the step
// takes nothing from its earlier owner). nullptr where it named nothing there.
const Named* namedAs(const analyze::PeakAllocation& allocation, const MeasuredStep& measured) {
  if (!allocation.made_in_step) {
    auto found = measured.before.find(allocation.data);
    if (found != measured.before.end()) return &found->second;
  }
  if (!allocation.freed_in_step) {
    auto found = measured.after.find(allocation.data);
    if (found != measured.after.end()) return &found->second;
  }
  return nullptr;
}

MemoryRole roleOf(const analyze::PeakAllocation& allocation, const MeasuredStep& measured) {
  if (const Named* named = namedAs(allocation, measured)) return named->role;
  if (heldWhenSeen(allocation, measured.leaves)) return MemoryRole::kParameters;
  if (heldWhenSeen(allocation, measured.gradients)) return MemoryRole::kGradients;
  if (heldWhenSeen(allocation, measured.saved)) return MemoryRole::kActivations;
  if (allocation.made_in_step && allocation.freed_in_step) return MemoryRole::kTemporaries;
  return MemoryRole::kOther;
}

// Sites described once each (a site may hold thousands of the peak's allocations).
class SiteNames {
 public:
  const AllocationSite& of(std::uint32_t id) {
    auto found = sites_.find(id);
    if (found == sites_.end()) {
      AllocationSite site;
      if (id == 0) {
        site.op = "<made before tracking began>";
      } else {
        site = analyze::describeSite(id);
      }
      found = sites_.emplace(id, std::move(site)).first;
    }
    return found->second;
  }

 private:
  std::unordered_map<std::uint32_t, AllocationSite> sites_;
};

// What the peak holds, added up by role, site and module as each allocation comes.
struct PeakTotals {
  std::map<std::uint32_t, PeakSite> by_site;
  std::map<std::uint32_t, std::array<std::int64_t, kMemoryRoleCount>> site_roles;
  std::map<std::string, ModuleBytes> by_module;
};

// The allocation's tensor: read when it was made, or at the step's end.
TensorInfo tensorOf(const analyze::PeakAllocation& allocation, const MeasuredStep& measured) {
  if (allocation.has_signature) return analyze::describeSignature(allocation.signature);
  auto found = measured.end_signatures.find(allocation.data);
  if (found != measured.end_signatures.end()) return analyze::describeSignature(found->second);
  return TensorInfo{};
}

// Whether backward accumulated into this gradient's storage before the peak (it held the storage
// then): the step needed it there, whatever set_to_none does.
bool accumulatedBeforePeak(const analyze::PeakAllocation& allocation,
                           const MeasuredStep& measured) {
  auto found = measured.gradients.find(allocation.data);
  if (found == measured.gradients.end()) return false;
  for (std::int64_t at : found->second.at_events) {
    if (allocation.made_at < at && at <= measured.peak.peak_event) return true;
  }
  return false;
}

void addToPeak(const analyze::PeakAllocation& allocation, const MeasuredStep& measured,
               SiteNames& names, PeakTotals& totals, PeakReport& report,
               std::vector<explain::PeakHolding>& holdings) {
  MemoryRole role = roleOf(allocation, measured);
  int role_index = static_cast<int>(role);
  RoleBytes& role_total = report.roles[static_cast<std::size_t>(role_index)];
  role_total.bytes += allocation.bytes;
  role_total.count += 1;
  TensorInfo tensor = tensorOf(allocation, measured);
  const AllocationSite& site = names.of(allocation.site);
  PeakSite& site_total = totals.by_site[allocation.site];
  if (site_total.count == 0) {
    site_total.site = site;
    site_total.tensor = tensor;
  }
  site_total.bytes += allocation.bytes;
  site_total.count += 1;
  totals.site_roles[allocation.site][static_cast<std::size_t>(role_index)] += allocation.bytes;
  // A parameter, its gradient and its optimizer state belong to the module that owns them (where
  // the caller said), not to wherever they happened to be allocated (outside every module).
  const Named* named = namedAs(allocation, measured);
  const std::string& module_name =
      named != nullptr && !named->module.empty() ? named->module : site.scope;
  ModuleBytes& module = totals.by_module[module_name];
  module.module = module_name;
  module.bytes += allocation.bytes;
  module.count += 1;
  module.role_bytes[role_index] += allocation.bytes;
  holdings.push_back(
      {allocation.bytes, role, site.scope, site.op, tensor.dtype, allocation.made_in_step,
       allocation.freed_in_step, allocation.made_at,
       role == MemoryRole::kGradients && accumulatedBeforePeak(allocation, measured)});
  if (report.tensors.size() < kMaxListed) {  // live_at_peak is largest first
    report.tensors.push_back(
        {allocation.bytes, role, site.op, site.scope, allocation.step, std::move(tensor)});
  }
}

// The sites and modules, largest first, at most kMaxListed of each; a site's role is the one
// holding most of its bytes.
void listSitesAndModules(PeakTotals& totals, PeakReport& report) {
  for (auto& [id, site] : totals.by_site) {
    const auto& bytes = totals.site_roles[id];
    site.role =
        static_cast<MemoryRole>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
    report.sites.push_back(std::move(site));
  }
  std::sort(report.sites.begin(), report.sites.end(),
            [](const PeakSite& a, const PeakSite& b) { return a.bytes > b.bytes; });
  if (report.sites.size() > kMaxListed) report.sites.resize(kMaxListed);
  for (auto& [name, module] : totals.by_module) report.modules.push_back(std::move(module));
  std::sort(report.modules.begin(), report.modules.end(),
            [](const ModuleBytes& a, const ModuleBytes& b) { return a.bytes > b.bytes; });
  if (report.modules.size() > kMaxListed) report.modules.resize(kMaxListed);
}

// Each device's peak is its own highest step's, which need not be the host's.
void keepHighestDevicePeaks(std::vector<DevicePeak>& step, std::vector<DevicePeak>& highest) {
  for (DevicePeak& peak : step) {
    auto kept = std::find_if(highest.begin(), highest.end(),
                             [&](const DevicePeak& each) { return each.device == peak.device; });
    if (kept == highest.end()) {
      highest.push_back(std::move(peak));
    } else if (peak.allocated_bytes > kept->allocated_bytes) {
      *kept = std::move(peak);
    }
  }
  std::sort(highest.begin(), highest.end(),
            [](const DevicePeak& a, const DevicePeak& b) { return a.device < b.device; });
}

PeakReport describe(const MeasuredStep& measured, const ExplainOptions& options) {
  PeakReport report;
  report.steps = options.steps;
  report.warmup = options.warmup;
  report.rank = rankFromEnvironment();
  report.peak_step = measured.step;
  report.peak_bytes = measured.peak.peak_bytes;
  report.baseline_bytes = measured.peak.baseline_bytes;
  report.end_bytes = measured.peak.end_bytes;
  report.peak_live_count = static_cast<std::int64_t>(measured.peak.live_at_peak.size());
  report.events_in_step = measured.peak.events;
  report.peak_event = measured.peak.peak_event;
  report.timeline = measured.peak.timeline;
  report.model_identified = measured.named_model;
  report.optimizer_identified = measured.named_optimizer;
  for (int role = 0; role < kMemoryRoleCount; ++role) {
    report.roles.push_back({static_cast<MemoryRole>(role), 0, 0});
  }
  SiteNames names;
  PeakTotals totals;
  std::vector<explain::PeakHolding> holdings;
  for (const analyze::PeakAllocation& allocation : measured.peak.live_at_peak) {
    addToPeak(allocation, measured, names, totals, report, holdings);
  }
  listSitesAndModules(totals, report);
  report.remedies = explain::peakRemedies(holdings, report.bytesOf(MemoryRole::kParameters));
  // What the breakdown could not tell: report/ puts it in words (PeakReport::noteLines).
  report.backward_ran = measured.backward_ran;
  report.dropped_events = measured.dropped_events;
  report.max_events_per_step = options.max_events_per_step;
  return report;
}

}  // namespace

const char* roleId(MemoryRole role) {
  switch (role) {
    case MemoryRole::kParameters:
      return "parameters";
    case MemoryRole::kGradients:
      return "gradients";
    case MemoryRole::kOptimizerState:
      return "optimizer_state";
    case MemoryRole::kActivations:
      return "activations";
    case MemoryRole::kTemporaries:
      return "temporaries";
    case MemoryRole::kOther:
      return "other";
  }
  return "other";
}

std::int64_t PeakReport::bytesOf(MemoryRole role) const {
  for (const RoleBytes& entry : roles) {
    if (entry.role == role) return entry.bytes;
  }
  return 0;
}

PeakReport explainPeak(const std::function<void(int)>& step, const ExplainOptions& options) {
  if (!step) throw std::invalid_argument("memseal explain: no step function");
  if (options.steps < options.warmup + 1) {
    throw std::invalid_argument("memseal explain: steps (" + std::to_string(options.steps) +
                                ") must exceed warmup (" + std::to_string(options.warmup) + ")");
  }
  if (options.max_events_per_step == 0) {
    throw std::invalid_argument("memseal explain: max_events_per_step must be positive");
  }
  TrackerOptions defaults;
  defaults.stacks = StackMode::kOn;
  defaults.record_tensor_metadata = true;
  TrackerOptions resolved = options.tracker.resolved(defaults);
  // Roles (backward's nodes) and tensor metadata come from watched ops.
  resolved.watch_ops = OpWatching::everyStep();
  Tracker tracker(resolved);
  tracker.start();
  explain::BackwardRoles backward;
  std::optional<MeasuredStep> highest;
  std::vector<StepPeak> step_peaks;
  std::vector<DevicePeak> device_peaks;
  for (std::uint32_t i = 0; i < options.steps; ++i) {
    setStep(i);
    if (i < options.warmup) {
      step(static_cast<int>(i));
      continue;
    }
    MeasuredStep measured = measureStep(step, i, options, backward);
    keepHighestDevicePeaks(measured.devices, device_peaks);
    step_peaks.push_back(
        {i, measured.peak.peak_bytes, measured.peak.baseline_bytes, measured.peak.end_bytes});
    if (!highest || measured.peak.peak_bytes > highest->peak.peak_bytes) {
      highest = std::move(measured);
    }
  }
  tracker.stop();
  PeakReport report = describe(*highest, options);
  report.step_peaks = std::move(step_peaks);
  report.devices = std::move(device_peaks);
  return report;
}

}  // namespace memseal
