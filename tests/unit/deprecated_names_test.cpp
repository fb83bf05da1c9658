// The names of the previous release still compile, as aliases of the new ones, for one release
// (docs/reference/deprecated.md): code written against them builds, with a deprecation warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <gtest/gtest.h>

#include <type_traits>

#include "memseal/explain.h"
#include "memseal/leak_detector.h"
#include "memseal/scope.h"
#include "memseal/tracker.h"

namespace memseal {
namespace {

static_assert(std::is_same_v<LeakPolicy, ReportPolicy>);
static_assert(std::is_same_v<ScopePolicy, ReportPolicy>);
static_assert(ScopePolicy::kReport == ReportPolicy::kWarn);
static_assert(std::is_same_v<ScopeGuard, RegionGuard>);
// explain.h still declares what moved to fit.h, memory_trace.h and html.h.
static_assert(sizeof(FitReport) > 0 && sizeof(MemoryTrace) > 0 && sizeof(HtmlPage) > 0);

TEST(DeprecatedNames, OldSpellingsConfigureTheSameOptions) {
  DetectorOptions detector;
  detector.on_leak = LeakPolicy::kNone;
  EXPECT_EQ(detector.on_leak, ReportPolicy::kNone);
  ScopeOptions scope;
  scope.on_survivors = ScopePolicy::kReport;
  EXPECT_EQ(scope.on_survivors, ReportPolicy::kWarn);
}

void namedTheOldWay() { MEMSEAL_SCOPE("old name"); }

TEST(DeprecatedNames, TheOldRegionMacroStillNamesARegion) {
  namedTheOldWay();  // compiles and runs (no tracker: nothing recorded)
  SUCCEED();
}

}  // namespace
}  // namespace memseal

#pragma GCC diagnostic pop
