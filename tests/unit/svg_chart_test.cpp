// The HTML report's chart kit on its own: round ticks that cover the data, byte axes in one unit,
// axis ranges that keep proportions or zoom in, thinning that keeps peaks, and SVG pieces whose
// numbers are clamped and whose text is what the caller escaped.
#include "report/html/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace memseal::report::html {
namespace {

bool isRound(double step) {
  double magnitude = std::pow(10.0, std::floor(std::log10(step)));
  double mantissa = step / magnitude;
  return std::fabs(mantissa - 1) < 1e-9 || std::fabs(mantissa - 2) < 1e-9 ||
         std::fabs(mantissa - 5) < 1e-9 || std::fabs(mantissa - 10) < 1e-9;
}

TEST(SvgChart, NiceTicksAreRoundEvenlySpacedAndCoverTheData) {
  struct Case {
    double lo, hi;
    int target;
  } cases[] = {{0, 97, 5}, {3.2, 3.9, 4}, {-40, 260, 6}, {1e6, 7.3e8, 5}, {5, 5, 5}};
  for (const Case& c : cases) {
    Ticks ticks = niceTicks(c.lo, c.hi, c.target);
    ASSERT_GE(ticks.values.size(), 2u) << c.lo << ".." << c.hi;
    EXPECT_LE(ticks.lo, c.lo);
    EXPECT_GE(ticks.hi, std::max(c.hi, c.lo));
    double step = ticks.values[1] - ticks.values[0];
    EXPECT_TRUE(isRound(step)) << step;
    for (std::size_t i = 1; i < ticks.values.size(); ++i) {
      EXPECT_NEAR(ticks.values[i] - ticks.values[i - 1], step, step * 1e-9);
    }
    EXPECT_LE(ticks.values.size(), static_cast<std::size_t>(2 * c.target + 3));
  }
}

TEST(SvgChart, StepTicksAreWholeStepsInsideTheRun) {
  Ticks ticks = stepTicks(3, 47);
  ASSERT_FALSE(ticks.values.empty());
  for (double value : ticks.values) {
    EXPECT_EQ(value, std::floor(value));
    EXPECT_GE(value, 3);
    EXPECT_LE(value, 47);
  }
}

TEST(SvgChart, ByteTicksUseOneBinaryUnitForEveryLabel) {
  ByteTicks ticks = byteTicks(0, 180.0 * 1024 * 1024, 4);
  EXPECT_STREQ(ticks.unit_name, "MiB");
  EXPECT_EQ(byteTickLabel(0, ticks), "0 ");
  EXPECT_EQ(byteTickLabel(50.0 * 1024 * 1024, ticks), "50 MiB");
  EXPECT_STREQ(byteTicks(0, 900, 4).unit_name, "B");
  EXPECT_STREQ(byteTicks(0, 3.0 * 1024 * 1024 * 1024 * 1024, 4).unit_name, "TiB");
}

TEST(SvgChart, AxisRangeStartsAtZeroUnlessTheDataSitsFarAboveIt) {
  EXPECT_EQ(axisRange(10, 100, 1), std::make_pair(0.0, 100.0));
  // 4 KiB of growth on a 200 MiB process: zoomed in, not a flat line from zero.
  auto [lo, hi] = axisRange(200e6, 200.004e6, 1);
  EXPECT_EQ(lo, 200e6);
  EXPECT_EQ(hi, 200.004e6);
  // Flat data is widened to the minimum span, never below zero when the data is not.
  auto [flat_lo, flat_hi] = axisRange(2, 2, 10);
  EXPECT_EQ(flat_lo, 0);
  EXPECT_EQ(flat_hi, 10);
}

TEST(SvgChart, ThinningKeepsEveryStretchsPeak) {
  std::vector<Point> points;
  for (int i = 0; i < 1000; ++i) points.push_back({i, i == 777 ? 1e6 : i % 7});
  std::vector<Point> thinned = thinToPeaks(points, 100);
  EXPECT_LE(thinned.size(), 100u);
  bool kept_spike = false;
  for (const Point& point : thinned) kept_spike = kept_spike || point.second == 1e6;
  EXPECT_TRUE(kept_spike);
  EXPECT_EQ(thinToPeaks(points, 5000).size(), points.size());
}

TEST(SvgChart, CoordinatesAreClampedAndWrittenWithOneDecimal) {
  Scale scale{0, 10, 100, 200};
  EXPECT_DOUBLE_EQ(scale(5), 150);
  EXPECT_TRUE(std::isfinite(scale(std::numeric_limits<double>::max())));
  EXPECT_EQ(px(12.345), "12.3");
  std::string rect = svgRect(1, 2, -5, 4, "bar", "<b>title</b>");
  EXPECT_NE(rect.find("width=\"0.0\""), std::string::npos);  // never a negative width
  EXPECT_NE(rect.find("<title><b>title</b></title>"), std::string::npos);
  EXPECT_EQ(svgRect(0, 0, 1, 1, "bar").find("<title>"), std::string::npos);
}

TEST(SvgChart, HoverColumnsTileThePlotWithOneTooltipPerStretch) {
  Plot plot{50, 10, 450, 210};
  Scale x{0, 99, plot.left, plot.right};
  std::vector<double> xs;
  for (int i = 0; i < 100; ++i) xs.push_back(i);
  int tooltips = 0;
  std::string columns = hoverColumns(plot, x, xs, 20, [&](std::size_t start, std::size_t end) {
    ++tooltips;
    return "steps " + std::to_string(start) + "-" + std::to_string(end - 1);
  });
  EXPECT_EQ(tooltips, 20);
  EXPECT_NE(columns.find("<title>steps 0-4</title>"), std::string::npos);
  EXPECT_NE(columns.find("<title>steps 95-99</title>"), std::string::npos);
  EXPECT_EQ(hoverColumns(plot, x, {}, 20, [](std::size_t, std::size_t) { return ""; }), "");
}

TEST(SvgChart, RoleAndFindingColoursComeFromFixedClasses) {
  EXPECT_STREQ(roleClass("gradients"), "role-gradients");
  EXPECT_STREQ(roleClass("\" onclick=\"x"), "role-unknown");
  EXPECT_STREQ(findingColour(1), "f1");
  EXPECT_STREQ(findingColour(7), "f1");
}

}  // namespace
}  // namespace memseal::report::html
