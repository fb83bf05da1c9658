// What to do with a report that found something, shared by the leak detector (LeakPolicy) and
// lifetime scopes (ScopePolicy): print it, throw it, hand it to a callback, or only return it.
#pragma once

#include <functional>
#include <iostream>

namespace memseal::common {

enum class PolicyAction { kPrint, kThrow, kCallback, kNone };

// `Error` is constructed from the report and thrown for kThrow.
template <typename Error, typename Report>
void applyPolicy(PolicyAction action, const Report& report,
                 const std::function<void(const Report&)>& callback) {
  switch (action) {
    case PolicyAction::kPrint:
      std::cerr << report.toText();
      break;
    case PolicyAction::kThrow:
      throw Error(report);
    case PolicyAction::kCallback:
      callback(report);
      break;
    case PolicyAction::kNone:
      break;
  }
}

}  // namespace memseal::common
