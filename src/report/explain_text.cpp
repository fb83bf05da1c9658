// PeakReport for people: the peak's headline, the roles as a bar each, then the modules, sites and
// tensors that hold it (the fit's text is in fit_text.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "memseal/explain.h"
#include "report/text_format.h"

namespace memseal {

namespace {

using report::bytesText;
using report::padded;

std::string percent(std::int64_t part, std::int64_t whole) {
  char text[16];
  std::snprintf(text, sizeof(text), "%5.1f%%",
                whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return text;
}

std::string bar(std::int64_t part, std::int64_t whole, int width) {
  int filled = whole > 0 ? static_cast<int>(std::lround(width * static_cast<double>(part) /
                                                        static_cast<double>(whole)))
                         : 0;
  filled = std::clamp(filled, 0, width);
  return std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), '.');
}

void modulesText(const std::vector<ModuleBytes>& modules, std::int64_t total, const char* indent,
                 std::ostringstream& out) {
  std::size_t shown = 0;
  for (const ModuleBytes& module : modules) {
    if (++shown > 10) break;
    int top = 0;
    for (int role = 1; role < kMemoryRoleCount; ++role) {
      if (module.role_bytes[role] > module.role_bytes[top]) top = role;
    }
    out << indent << padded(module.module.empty() ? "<none>" : module.module, 32)
        << padded(bytesText(module.bytes), 11) << percent(module.bytes, total) << "  mostly "
        << roleId(static_cast<MemoryRole>(top)) << "\n";
  }
}

// A CUDA device at its peak: allocated beside reserved, then its roles and sites.
void deviceText(const DevicePeak& device, std::ostringstream& out) {
  out << "\ncuda:" << device.device << " at its peak (step " << device.step << ")\n"
      << "  allocated  " << padded(bytesText(device.allocated_bytes), 11) << "held by tensors ("
      << bytesText(device.baseline_allocated_bytes) << " when the step began, "
      << bytesText(device.end_allocated_bytes) << " when it ended)\n"
      << "  reserved   " << padded(bytesText(device.reserved_bytes), 11)
      << "by the caching allocator (at most " << bytesText(device.reserved_peak_bytes)
      << " in the step)\n"
      << "  cached     " << padded(bytesText(device.cachedFreeBytes()), 11)
      << "reserved, held by no tensor: free blocks, gaps of split segments, rounding\n";
  if (device.pending_free_bytes > 0) {
    out << "  waiting    " << padded(bytesText(device.pending_free_bytes), 11)
        << "freed by the program, still in use by a stream\n";
  }
  out << "  by role (of allocated)\n";
  for (const RoleBytes& role : device.roles) {
    out << "    " << padded(roleId(role.role), 17) << padded(bytesText(role.bytes), 11)
        << percent(role.bytes, device.allocated_bytes) << "  "
        << bar(role.bytes, device.allocated_bytes, 30) << "\n";
  }
  if (!device.modules.empty()) {
    out << "  by module\n";
    modulesText(device.modules, device.allocated_bytes, "    ", out);
  }
  if (!device.sites.empty()) out << "  by site\n";
  std::size_t shown = 0;
  for (const DevicePeakSite& site : device.sites) {
    if (++shown > 8) break;
    out << "    " << padded(bytesText(site.bytes), 11) << padded(roleId(site.role), 16) << site.op
        << (site.scope.empty() ? "" : " in scope " + site.scope) << "  x" << site.count << "\n";
  }
}

}  // namespace

std::string PeakReport::toText() const {
  std::ostringstream out;
  out << "memseal: peak of step " << peak_step << ": " << bytesText(peak_bytes)
      << (devices.empty() ? " of tensor memory live (" : " of host tensor memory live (")
      << bytesText(baseline_bytes) << " when the step began, " << bytesText(end_bytes)
      << " when it ended; " << peak_live_count << " allocations)\n\n";
  out << "by role\n";
  for (const RoleBytes& role : roles) {
    out << "  " << padded(roleId(role.role), 17) << padded(bytesText(role.bytes), 11)
        << percent(role.bytes, peak_bytes) << "  " << bar(role.bytes, peak_bytes, 30) << "\n";
  }
  if (!modules.empty()) {
    out << "\nby module (Python module or MEMSEAL_REGION)\n";
    modulesText(modules, peak_bytes, "  ", out);
  }
  if (!sites.empty()) {
    out << "\nby site\n";
    std::size_t shown = 0;
    for (const PeakSite& site : sites) {
      if (++shown > 8) break;
      std::string op = site.site.op;
      if (!site.site.outer_op.empty() && site.site.outer_op != op) {
        op += " in " + site.site.outer_op;
      }
      out << "  " << padded(bytesText(site.bytes), 11) << padded(roleId(site.role), 16) << op
          << "  x" << site.count << "\n";
      std::vector<std::string> lines = report::stackLines(site.site.frames);
      for (std::size_t i = 0; i < lines.size() && i < 3; ++i) {
        out << "      at " << lines[i] << "\n";
      }
    }
  }
  if (!tensors.empty()) {
    out << "\nlargest tensors at the peak\n";
    std::size_t shown = 0;
    for (const PeakTensor& tensor : tensors) {
      if (++shown > 5) break;
      out << "  " << padded(bytesText(tensor.bytes), 11) << padded(roleId(tensor.role), 16)
          << report::tensorText(tensor.tensor) << "  (" << tensor.op << ")\n";
    }
  }
  for (const DevicePeak& device : devices) deviceText(device, out);
  if (!remedies.empty()) {
    out << "\nwhat would lower this peak (bytes removed from it; another moment of the step may "
           "then be its peak)\n";
    for (const PeakRemedy& remedy : remedies) {
      std::string bytes = (remedy.upper_bound ? "up to " : "") + bytesText(remedy.bytes);
      out << "  " << padded(bytes, 17) << remedy.kind
          << (remedy.target.empty() ? "" : " " + remedy.target) << "\n"
          << "      " << report::wrap(remedy.change + "; cost: " + remedy.cost, 88, "      ")
          << "\n";
    }
  }
  for (const std::string& note : noteLines()) {
    out << "note: " << report::wrap(note, 94, "      ") << "\n";
  }
  return out.str();
}

// What the breakdown could not tell, in words (the fields are explain's, the words report/'s).
std::vector<std::string> PeakReport::noteLines() const {
  std::vector<std::string> lines;
  if (!backward_ran) {
    lines.push_back(
        "no backward ran in the step: nothing is counted as activations saved for backward");
  }
  if (!model_identified) {
    lines.push_back(
        "no model named: parameters and gradients are those backward reached (frozen parameters "
        "and buffers count as other)");
  }
  if (!optimizer_identified) lines.push_back("no optimizer named: its state counts as other");
  if (dropped_events > 0) {
    lines.push_back("the step made more than " + std::to_string(max_events_per_step) +
                    " allocations and frees (max_events_per_step): its peak is read from the "
                    "newest only, and roles told by backward may be missing");
  }
  for (const DevicePeak& device : devices) {
    if (device.dropped_events > 0) {
      lines.push_back("cuda:" + std::to_string(device.device) + "'s step made more than " +
                      std::to_string(max_events_per_step) +
                      " allocator events (max_events_per_step): its peak is replayed from the "
                      "newest only and may read low");
    }
  }
  lines.insert(lines.end(), notes.begin(), notes.end());
  return lines;
}

}  // namespace memseal
