#include "inject/named_steps.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "inject/python_lock.h"
#include "inject/step_ledger.h"

namespace memseal::inject {

namespace {

std::atomic<NamedSteps*> g_named_steps{nullptr};

void onScopeEntered(const char* name) {
  if (NamedSteps* steps = g_named_steps.load(std::memory_order_acquire)) {
    steps->onNamedScope(name);
  }
}

// In a program linked to libmemseal, its library tells of each MEMSEAL_REGION entered; elsewhere
// the symbol is not there.
void listenToMemsealScopes() {
  using SetObserver = void (*)(void (*)(const char*));
  auto set = reinterpret_cast<SetObserver>(dlsym(RTLD_DEFAULT, "memseal_set_scope_observer"));
  if (set != nullptr) set(&onScopeEntered);
}

}  // namespace

bool stepNameMatches(const char* name, const std::string& wanted) {
  if (name == nullptr) return false;
  if (wanted == name) return true;
  const char* colons = std::strrchr(name, ':');
  const char* dot = std::strrchr(name, '.');
  const char* last = std::max(colons, dot);  // nullptr compares below any pointer into name
  return last != nullptr && wanted == last + 1;
}

NamedSteps::NamedSteps(std::string name, StepLedger& ledger)
    : name_(std::move(name)), ledger_(ledger) {
  g_named_steps.store(this, std::memory_order_release);
  listenToMemsealScopes();
  callback_.setInstalled(true);
}

NamedSteps::~NamedSteps() { g_named_steps.store(nullptr, std::memory_order_release); }

void NamedSteps::onOp(const char* name, bool outermost) {
  if (outermost && stepNameMatches(name, name_)) takeStep();
}

void NamedSteps::onNamedScope(const char* name) {
  if (stepNameMatches(name, name_)) takeStep();
}

void NamedSteps::takeStep() {
  if (ledger_.stopped()) return;
  bool taken;
  {
    // The detector writes down findings at some steps, naming Python frames.
    PythonLock python(PythonLock::Threads::kPythonOnly);
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(ledger_.mutex());
    taken = ledger_.takeLocked(now, true);
  }
  if (!taken) return;
  steps_.fetch_add(1);
  ledger_.afterStep();
}

std::vector<report::StepsTaken> NamedSteps::stepsTaken() {
  return {report::NamedCallSteps{name_, steps_.load()}};
}

}  // namespace memseal::inject
