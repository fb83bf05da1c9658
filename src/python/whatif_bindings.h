// Binds the replay of a CUDA memory snapshot under other allocator settings (memseal/whatif.h)
// into memseal._memseal: memseal.whatif.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace memseal::python {

void bindWhatIf(pybind11::module_& m);

}  // namespace memseal::python
