// From a finding's evidence to a cause and its fix, in words a newcomer can act on.
#pragma once

#include <string>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// The category of retained tensor storage, from an example tensor and whether backward runs.
LeakCategory categorize(const TensorInfo& tensor, bool backward_ran);
// The cause and the fix for the finding's category, naming its op, tensors and parts.
std::string hintFor(const LeakFinding& finding);
// The cause and the fix for a finding of a child that `memseal run --follow-fork` saw forked but
// not exec'd (forked_child_verdict.h), judged on its memory alone: tensors retained, or untracked
// growth of its private memory (copy-on-write of its parent's pages).
std::string forkedChildHintFor(LeakCategory category);
// "[1..57, 64] (23 distinct shapes)"; empty when the range is empty.
std::string shapeRangeText(const ShapeRange& shapes);

}  // namespace memseal::detect
