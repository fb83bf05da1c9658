// What memseal does with a report that found something, for the leak detector (on_leak) and for
// lifetime scopes (on_survivors) alike.
#pragma once

namespace memseal {

enum class ReportPolicy {
  kWarn,      // print the report to stderr
  kThrow,     // throw the report's error: LeakError, ScopeLeakError (a scope's destructor, which
              // must not throw, prints instead)
  kCallback,  // call the options' callback (on_leak_callback, on_survivors_callback)
  kNone,      // only return the report
  // ScopePolicy's name for kWarn; deprecated, removed in the next release.
  kReport [[deprecated("use memseal::ReportPolicy::kWarn")]] = kWarn,
};

// The names of this release's predecessor; deprecated, removed in the next release.
using LeakPolicy [[deprecated("use memseal::ReportPolicy")]] = ReportPolicy;
using ScopePolicy [[deprecated("use memseal::ReportPolicy")]] = ReportPolicy;

}  // namespace memseal
