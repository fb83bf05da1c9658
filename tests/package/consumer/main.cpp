// Checks a loop that keeps one tensor per step through the installed memseal: prints the version
// and the category found, exits 0 only if the leak is found and named.
#include <ATen/ops/ones.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "memseal/leak_detector.h"
#include "memseal/version.h"

int main() {
  std::vector<at::Tensor> kept;
  memseal::DetectorOptions options;
  options.on_leak = memseal::ReportPolicy::kNone;
  options.steps = 12;
  options.warmup = 2;
  memseal::LeakReport report =
      memseal::check([&](int) { kept.push_back(at::ones({16})); }, options);
  const char* category = report.leak ? memseal::categoryId(report.findings.front().category) : "";
  std::printf("memseal %s: %s\n", memseal::version(), report.leak ? category : "no leak");
  return report.leak && std::strcmp(category, "tensors-retained") == 0 ? 0 : 1;
}
