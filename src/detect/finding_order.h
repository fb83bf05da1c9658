// The order of a report's findings (costliest at its peak first, resident growth last), and what
// malloc's held free memory is charged to.
#pragma once

#include <cstdint>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::detect {

// What a finding costs at its peak: the most one of its build-ups held before it was freed, or what
// it holds now (its retained storage; for graphs without storage, the resident memory its steps
// grew by). A leak of 100 KiB a step kept for 5,000 steps costs more than an evaluation pass that
// kept 1 MiB a step for 40 steps.
double costAtPeak(const LeakFinding& finding);
// The order of a report's findings: costliest at its peak first; resident growth last, as the
// weakest evidence (it names no site).
bool reportedBefore(const LeakFinding& a, const LeakFinding& b);
// Freed memory malloc came to hold since warm-up (`held_free_bytes`), where the report has a graph
// kept across steps: the graphs' small objects, left between what each step freed, keep malloc
// from reusing it (the same loop without the leak does not grow it), so it is what that leak costs.
// Added, per step of the `steps` it grew over, to the resident memory per step of the costliest
// finding of graphs held now; false when there is none (malloc's own fragmentation then).
bool chargeHeldFreeToKeptGraphs(std::int64_t held_free_bytes, std::uint32_t steps,
                                std::vector<LeakFinding>& findings);
// Tensor storage kept in fewer than half the steps it was judged over: growth spread thinly
// (no single site retains in most steps), or a site that keeps now and then.
bool keptInFewSteps(const LeakFinding& finding);
// A report's findings in reportedBefore's order, except that tensors kept in fewer than half their
// steps come after a retained graph's finding (most likely inputs the graph saved).
void orderFindings(std::vector<LeakFinding>& findings);

}  // namespace memseal::detect
