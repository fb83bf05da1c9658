// What to do with a report that found something, shared by the leak detector (on_leak) and
// lifetime scopes (on_survivors): print it, throw it, hand it to a callback, or only return it.
#pragma once

#include <functional>
#include <iostream>

#include "memseal/policy.h"

namespace memseal::common {

// `Error` is constructed from the report and thrown for kThrow.
template <typename Error, typename Report>
void applyPolicy(ReportPolicy policy, const Report& report,
                 const std::function<void(const Report&)>& callback) {
  switch (policy) {
    case ReportPolicy::kWarn:
      std::cerr << report.toText();
      break;
    case ReportPolicy::kThrow:
      throw Error(report);
    case ReportPolicy::kCallback:
      callback(report);
      break;
    case ReportPolicy::kNone:
      break;
  }
}

}  // namespace memseal::common
