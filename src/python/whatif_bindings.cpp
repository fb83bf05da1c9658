// A CUDA memory snapshot replayed under other caching-allocator settings, for Python, from the
// same core as `memseal whatif`.
#include "python/whatif_bindings.h"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "memseal/whatif.h"

namespace py = pybind11;

namespace memseal::python {

void bindWhatIf(py::module_& m) {
  py::class_<WhatIfReport>(m, "WhatIfReport")
      .def("text", &WhatIfReport::toText)
      .def("to_json", &WhatIfReport::toJson);
  m.def(
      "whatif_snapshot",
      [](const py::bytes& snapshot, const std::string& source,
         const std::vector<std::string>& settings, std::optional<std::uint64_t> device_bytes,
         int device) {
        WhatIfOptions options;
        options.settings = settings;
        options.device_bytes = device_bytes;
        options.device = device;
        std::string bytes = snapshot;
        py::gil_scoped_release unlocked;  // a long trace replays for a while
        return whatIfSnapshot(bytes, source, options);
      },
      py::arg("snapshot"), py::arg("source"), py::arg("settings"), py::arg("device_bytes"),
      py::arg("device"));
}

}  // namespace memseal::python
