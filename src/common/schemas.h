// Every document memseal writes, in one table: its schema's name and the version this memseal
// writes. A document names its schema in one style, "NAME/VERSION" ("memseal.check/1"), under the
// key "schema"; names are "memseal." and words joined by underscores. Writers and readers take
// both from here, so a version changes in one place.
#pragma once

#include <string>

namespace memseal::common {

struct Schema {
  const char* name;
  int version;
  // "NAME/VERSION", of this version or an older one a reader still reads.
  std::string tag() const { return tag(version); }
  std::string tag(int of_version) const {
    return std::string(name) + "/" + std::to_string(of_version);
  }
};

// Reports (the public headers name the first three as kCheckReportSchema and its version, ...).
inline constexpr Schema kCheckSchema{"memseal.check", 1};      // a leak check (docs/check-json.md)
inline constexpr Schema kMergedSchema{"memseal.merged", 1};    // a job's ranks (merged-json.md)
inline constexpr Schema kDiffSchema{"memseal.diff", 1};        // two runs compared (diff-json.md)
inline constexpr Schema kExplainSchema{"memseal.explain", 1};  // a peak explained
inline constexpr Schema kFitSchema{"memseal.fit", 2};          // a fit; version 1 is still read
inline constexpr Schema kWhatIfSchema{"memseal.whatif", 1};    // settings replayed (whatif.md)
// What `memseal run --live` serves as /state.json.
inline constexpr Schema kLiveSchema{"memseal.live", 1};
// A CUDA out-of-memory's forensics (its file, memseal-cuda-oom-PID-N.json).
inline constexpr Schema kCudaOomSchema{"memseal.cuda_oom", 1};
// memseal's key in a CUDA memory snapshot pickle (memory_viz).
inline constexpr Schema kMemoryVizSchema{"memseal.memory_viz", 1};
// Between processes of `memseal run`: a rank's report gathered from another node.
inline constexpr Schema kGatheredSchema{"memseal.gathered", 1};

}  // namespace memseal::common
