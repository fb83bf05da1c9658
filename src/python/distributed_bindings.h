// Binds a distributed job's ranks (RankIdentity, the merge of rank reports) into memseal._memseal.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace memseal::python {

void bindDistributed(pybind11::module_& m);

}  // namespace memseal::python
