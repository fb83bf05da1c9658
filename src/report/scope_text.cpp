// ScopeReport as text: what a scope made that is still alive, where each survivor was made, and
// what to do about it.
#include <sstream>

#include "common/text.h"
#include "memseal/scope.h"
#include "report/text_format.h"

namespace memseal {

std::string ScopeReport::toText() const {
  std::ostringstream out;
  if (clean()) {
    out << "memseal scope '" << name << "': clean (" << stats.made << " made, " << stats.freed
        << " freed, " << stats.kept << " kept)\n";
    return out.str();
  }
  out << "memseal scope '" << name << "': " << common::countedText(stats.survivors, "tensor")
      << " (" << report::bytesText(stats.survivor_bytes) << ") made here "
      << (stats.survivors == 1 ? "is" : "are") << " still alive\n";
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

}  // namespace memseal
