// Binds explain, capacity, the memory_viz trace and the HTML page into memseal._memseal.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace memseal::python {

void bindExplain(pybind11::module_& m);

}  // namespace memseal::python
