#include "inject/step_ledger.h"

namespace memseal::inject {

bool StepLedger::takeLocked(Clock::time_point now, bool coalesce) {
  if (stopped()) return false;
  if (coalesce && tooSoonLocked(now)) return false;
  last_step_ = now;
  ++taken_;
  detector_.step();
  cost_.add(Clock::now() - now);
  return true;
}

}  // namespace memseal::inject
