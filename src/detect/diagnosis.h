// From a leaking site's evidence to a cause and its fix, in words a newcomer can act on.
#pragma once

#include <string>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// The category of retained tensor storage, from the example tensor and whether backward runs.
LeakCategory categorize(const TensorInfo& tensor, bool backward_ran);
// The cause and the fix for the finding's category, naming its op and tensor.
std::string hintFor(const LeakFinding& finding);

}  // namespace memseal::detect
