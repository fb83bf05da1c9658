// Binds the comparison of two reports and the baseline check (memseal/diff.h) into
// memseal._memseal: memseal.diff and the pytest plugin's budgets and baselines.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace memseal::python {

void bindDiff(pybind11::module_& m);

}  // namespace memseal::python
