// What holds a leak's tensors in a Python program under `memseal run`: the Python module's holder
// search (python/memseal/_holders.py) run inside the program on a report that says leak, while its
// loop still holds what it kept, so that `run` names the list, global or closure as `check` does.
//
// The search walks the program's heap, so it runs once per cause: when a report has a finding
// whose cause (category, op and the Python line that made it) no search has looked for yet, and no
// sooner than twenty times the last search's duration after it (a twentieth of the program's time
// at most); a cause first looked for early, at a build-up in progress, is looked for once more. As
// the program's own code ends, every cause is looked for again: a finding gathers parts as the run
// goes on (the storages of a second layer's kept inputs), and the holder the report at exit names
// is the one that holds the finding as it stands, as `check` names it. Every later report of the
// run takes the holders found for its causes, at its own finding indices; a search that finds no
// holder for a cause leaves the earlier one's.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal::inject {

// The request the search reads (holder_search.py): per finding its category, graph root, whether
// what was freed is building up again, storage addresses and Python frames.
std::string holderSearchRequest(const LeakReport& report);
// The search's answer (a JSON array in the form of the report's "python.holders"); what cannot be
// read gives one holder of finding -1 that says so.
std::vector<LeakHolder> holdersFromSearch(const std::string& answer);

class RunHolders {
 public:
  // `search` runs the heap search for a request; empty where Python cannot run it.
  using Search = std::function<std::optional<std::string>(const std::string& request)>;
  explicit RunHolders(Search search);

  enum class When {
    kWhenDue,    // a report at a step boundary: searches when a cause is new and the time allows
    kNow,        // searches for any new cause now
    kCodeEnded,  // the program's own code has ended (Python's atexit): searches for every cause
    kNever,      // Python has finalised: only what earlier searches found
    // A build-up in progress (build_up_probe.h): searches for any new cause now, before it is
    // freed. It may be too soon to tell the holder from what the step is using (a local of the
    // forward pass), so the next search looks for such a cause again while it is still held, and
    // what that one finds replaces what this one found.
    kEarly,
  };
  // Puts into `report` the holders of its findings that searches found, searching first as `when`
  // says. Takes the GIL through `search`: call it holding no lock that a thread with the GIL may
  // wait for.
  void attach(LeakReport& report, When when);

 private:
  std::vector<std::string> causesToSearch(const LeakReport& report, When when) const;

  Search search_;
  std::mutex mutex_;
  std::set<std::string> searched_;  // causes a search has looked for
  std::set<std::string> early_;     // causes only a kEarly search has looked for, to look for again
  std::map<std::string, std::vector<LeakHolder>> found_;  // by cause; `finding` unused
  std::vector<LeakHolder> about_search_;                  // lines of finding -1 (a failed search)
  std::chrono::steady_clock::time_point next_search_{};
};

}  // namespace memseal::inject
