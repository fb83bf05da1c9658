// Causes whose build-ups of memory were freed together, once or more: a running total's graph
// reset every N steps, a list that goes when its function returns, predictions gathered over an
// epoch, and tensors in reference cycles that Python's garbage collector frees now and then. Who
// freed a build-up decides what it was: the program (a finding that says it was held for a while,
// or a note for tensors without autograd history), or the collector (garbage, however it rises and
// falls: a note, never a leak).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "detect/retention_history.h"
#include "memseal/leak_detector.h"
#include "track/collected_frees.h"

namespace memseal::detect {

// The same mistake seen again: its category and the line of the user's code that made it (what a
// build-up's finding names first, its graph's root or its largest part, may differ from one
// build-up to the next), else its op.
std::string causeKey(const LeakFinding& finding);

struct HeldCause {
  std::string key;
  LeakFinding finding;  // as built while it was held, with `freed` set
  // How many of its build-ups lasted each number of steps: the period is their median, since the
  // first (cut by warm-up) and the last (cut by the program's end) are shorter than the rest.
  std::map<std::uint32_t, std::uint32_t> build_up_lengths;
  std::uint32_t detected_at = 0;
  bool freed_before = false;  // its groups had a build-up freed before this one
  bool by_collector = false;  // Python's garbage collector freed its build-ups
};

// Whether `finding` is `cause` seen again: the same key, or the same category and allocation site
// (a report made after Python finalised reads no Python frame, so its key names an op where the
// cause, recorded as the program ran, named the line).
bool sameCause(const LeakFinding& finding, const HeldCause& cause);

// One cause, one finding. A cause judged in two phases comes out of each phase's judgement as a
// finding of the same category and line: the steps a Python program's ops gave before its own
// steps took over, then its own; a helper that keeps tensors, called from training and from
// evaluation. Those still growing are one finding, the first of them (the costliest, once the
// findings are ordered), whose survivors count the others' too. A cause held and freed keeps its
// findings: their build-ups say when each was held.
void mergeFindingsOfOneCause(std::vector<LeakFinding>& findings);

// Adds `cause` to `into`, merged with a cause of the same key (and the same freer) found before.
void addHeldCause(std::vector<HeldCause>& into, HeldCause cause);

// What the garbage collector freed that could be `collapse`'s build-up: allocated in its steps,
// of its site (a storage group) or of any site (a graph's tensors were made by many ops), freed
// from its newest step to the boundary that found it freed.
track::CollectedFreesQuery collectorQuery(const Collapse& collapse);
// Whether `collapse` was freed by the collector, given what it freed (collectorQuery): half of the
// build-up's tensor storage at least, or, for graphs (whose build-up holds no storage of its own),
// allocations of a quarter of its steps at least, as a collapse leaves at most a quarter held.
bool freedByCollector(const Collapse& collapse, const track::CollectedFrees& collected);

}  // namespace memseal::detect
