// JSON of the types every report shares (a tensor's description, a stack), so that check, explain
// and the Python module write them one way.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "memseal/leak_detector.h"
#include "memseal/tracker.h"

namespace memseal::report {

// null when the tensor is not known; else shape, dtype, requires_grad, is_leaf, grad_fn.
nlohmann::ordered_json tensorJson(const TensorInfo& tensor);
// Innermost first: function, file, line, library, internal.
nlohmann::ordered_json framesJson(const std::vector<StackFrame>& frames);
// A distributed job's rank, as check and explain reports write it: rank, local_rank, world_size,
// run_id.
nlohmann::ordered_json rankJson(const RankIdentity& rank);

}  // namespace memseal::report
