// The libtorch release memseal is compiled against, for the few internal libtorch interfaces that
// differ between the releases it builds with (cmake/MemsealTorch.cmake: 2.9 up to 2.15).
#pragma once

// torch/csrc/api/include/torch/version.h: TORCH_VERSION_MAJOR and TORCH_VERSION_MINOR in every
// supported release (in the newer ones it includes torch/headeronly/version.h, which defines them).
#include <torch/version.h>

// True when the libtorch compiled against is `major`.`minor` or newer.
#define MEMSEAL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
