// Helpers for the leak detector that several integration test files share (they are compiled
// together, so a helper of one file's own would clash with another's).
#pragma once

#include <string>

#include "memseal/leak_detector.h"

namespace memseal::test {

// Reports only (no exception, no stderr), three warm-up steps.
inline DetectorOptions quietDetector() {
  DetectorOptions options;
  options.on_leak = ReportPolicy::kNone;
  options.warmup = 3;
  return options;
}

// The first finding of a category, or null.
inline const LeakFinding* findCategory(const LeakReport& report, LeakCategory category) {
  for (const LeakFinding& finding : report.findings) {
    if (finding.category == category) return &finding;
  }
  return nullptr;
}

// Whether one of the report's notes contains text.
inline bool hasNote(const LeakReport& report, const std::string& text) {
  for (const std::string& note : report.noteLines()) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace memseal::test
