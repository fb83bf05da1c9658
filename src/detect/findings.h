// Puts evidence into findings a person reads: one finding per cause. Parts that one retained root
// keeps alive (the graph behind a kept output, the parameters of one module built per step) are
// grouped into one finding that lists them; a create_graph cycle is named as such.
#pragma once

#include <string>
#include <vector>

#include "detect/evidence.h"
#include "memseal/leak_detector.h"

namespace memseal::detect {

// A retained graph's finding (autograd-graph-retained, grad-enabled inference, create_graph cycle).
bool isGraphFinding(const LeakFinding& finding);
// The line of the user's code that made a site: its first frame that is not libtorch's, the
// runtime's or memseal's (file:line, else the function); empty when no stack names one.
std::string causeLine(const AllocationSite& site);

// Largest first; resident growth last, as the weakest evidence (it names no site). Reads example
// tensors of the flagged groups (on this thread's tensors only) and symbolizes their stacks.
std::vector<LeakFinding> buildFindings(const LeakEvidence& evidence);

// Graphs the program freed since the last boundary (a report at exit: the function that kept a
// running total returned) come back into a report as findings from their history, after resident
// memory was judged with no other finding beside it (`evidence`): the growth those graphs cost is
// theirs, as it would have been judged while they were alive, not a second, native leak. Removes
// such untracked-growth findings from `findings`, and the tracked growth in no single site whose
// tensors are like the ones brought back (same dtype and grad_fn): the same outputs, judged while
// they were gone.
void dropGrowthOfGraphsBroughtBack(const LeakEvidence& evidence,
                                   std::vector<LeakFinding>& findings);

// A finding and the groups of survivors it was made from (the evidence's storage groups and graph
// root sites), so what a group held can be told again once it is freed.
struct BuiltFinding {
  LeakFinding finding;
  std::vector<GroupId> groups;
};
std::vector<BuiltFinding> buildFindingsWithGroups(const LeakEvidence& evidence);

}  // namespace memseal::detect
