#include "inject/step_source.h"

#include "inject/named_steps.h"
#include "inject/op_loop_steps.h"
#include "inject/time_windows.h"

namespace memseal::inject {

std::unique_ptr<StepSource> makeStepSource(const StepRule& rule, StepLedger& ledger,
                                           bool watch_ops_automatically_while_counting) {
  switch (rule.kind) {
    case StepRule::Kind::kInterval:
      // Time windows need no ops: without an op callback, libtorch skips its RecordFunction work
      // on every op (unless the tracker watches ops), the largest cost of watching a loop of small
      // ops.
      return std::make_unique<IntervalSteps>(rule.interval, ledger);
    case StepRule::Kind::kOn:
      return std::make_unique<NamedSteps>(rule.name, ledger);
    case StepRule::Kind::kAuto:
      break;
  }
  return std::make_unique<OpLoopSteps>(ledger, watch_ops_automatically_while_counting);
}

}  // namespace memseal::inject
