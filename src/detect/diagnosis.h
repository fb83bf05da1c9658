// From a finding's evidence to a cause and its fix, in words a newcomer can act on.
#pragma once

#include <string>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// The category of retained tensor storage, from an example tensor and whether backward runs.
LeakCategory categorize(const TensorInfo& tensor, bool backward_ran);
// The cause and the fix for the finding's category, naming its op, tensors and parts. Untracked
// growth of "private memory" is a forked child's copy-on-write.
std::string hintFor(const LeakFinding& finding);
// "[1..57, 64] (23 distinct shapes)"; empty when the range is empty.
std::string shapeRangeText(const ShapeRange& shapes);

}  // namespace memseal::detect
