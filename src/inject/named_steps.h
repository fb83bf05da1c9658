// --step-on NAME: a step ends at each outermost call of the op ("aten::linear" or "linear"), the
// TorchScript function ("forward") or the named region (RECORD_USER_SCOPE, torch.profiler's
// record_function) the user named, and at each MEMSEAL_REGION(NAME) entered in a program linked to
// libmemseal (its library tells of each scope entered: memseal_set_scope_observer).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "inject/op_callback.h"
#include "inject/step_source.h"

namespace memseal::inject {

// Whether an op or function named `name` is what the user named: the whole name, or the part after
// its namespace ("linear" for "aten::linear", "forward" for "__torch__.Model.forward").
bool stepNameMatches(const char* name, const std::string& wanted);

class NamedSteps final : public StepSource, private OpListener {
 public:
  NamedSteps(std::string name, StepLedger& ledger);
  ~NamedSteps() override;

  std::vector<report::StepsTaken> stepsTaken() override;
  std::vector<std::pair<std::string, double>> iterationsPerStep() override { return {}; }

  // A MEMSEAL_REGION entered.
  void onNamedScope(const char* name);

 private:
  void onOp(const char* name, bool outermost) override;
  void takeStep();

  std::string name_;
  StepLedger& ledger_;
  std::atomic<std::uint64_t> steps_{0};
  OpCallback callback_{*this};
};

}  // namespace memseal::inject
