// Precompiled for the tests, examples and benchmarks: libtorch's umbrella header, which takes
// 30-45 s to parse in each file that includes it.
#pragma once
#include <torch/torch.h>

#include <nlohmann/json.hpp>
