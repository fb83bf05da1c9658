// The bucket choice of pool classes: every combination of sizes, the smallest bucket that fits,
// and the options refused.
#include "pool/bucket_grid.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "common/text.h"

namespace memseal::pool {
namespace {

TEST(BucketGrid, EveryCombinationOfSizesIsABucketFirstDimensionSlowest) {
  BucketGrid grid({{1, 2, 4}, {64, 128}});
  ASSERT_EQ(grid.count(), 6u);
  EXPECT_EQ(grid.rank(), 2u);
  EXPECT_EQ(grid.shape(0), (std::vector<std::int64_t>{1, 64}));
  EXPECT_EQ(grid.shape(1), (std::vector<std::int64_t>{1, 128}));
  EXPECT_EQ(grid.shape(5), (std::vector<std::int64_t>{4, 128}));
  EXPECT_EQ(grid.elements(3), 2 * 128);
  EXPECT_EQ(grid.largest(), (std::vector<std::int64_t>{4, 128}));
}

TEST(BucketGrid, TheSmallestFittingBucketHoldsTheRequestInEveryDimension) {
  BucketGrid grid({{1, 2, 4, 8}, {64, 128, 256}});
  std::int64_t exact[] = {2, 128};
  EXPECT_EQ(grid.shape(grid.smallestFitting(exact)), (std::vector<std::int64_t>{2, 128}));
  std::int64_t between[] = {3, 65};
  EXPECT_EQ(grid.shape(grid.smallestFitting(between)), (std::vector<std::int64_t>{4, 128}));
  std::int64_t empty[] = {0, 0};
  EXPECT_EQ(grid.shape(grid.smallestFitting(empty)), (std::vector<std::int64_t>{1, 64}));
  std::int64_t too_long[] = {1, 257};
  EXPECT_EQ(grid.smallestFitting(too_long), BucketGrid::kNone);
  std::int64_t too_many[] = {9, 64};
  EXPECT_EQ(grid.smallestFitting(too_many), BucketGrid::kNone);
  for (std::size_t i = 0; i < grid.count(); ++i) {
    EXPECT_EQ(grid.fits(i, between), grid.shape(i)[0] >= 3 && grid.shape(i)[1] >= 65) << i;
  }
}

TEST(BucketGrid, RefusesSizesThatMakeNoSenseSayingWhich) {
  auto refused = [](std::vector<std::vector<std::int64_t>> sizes, const std::string& expected) {
    try {
      BucketGrid grid(std::move(sizes));
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const std::invalid_argument& error) {
      EXPECT_EQ(std::string(error.what()), expected);
    }
  };
  refused({}, "sizes has no dimension");
  refused({{4}, {}}, "sizes of dimension 1 are empty");
  refused({{0, 4}}, "sizes of dimension 0 must be positive (got 0)");
  refused({{4, 4}}, "sizes of dimension 0 must be strictly ascending (4 then 4)");
  std::vector<std::int64_t> many(65);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(i + 1);
  refused({many, many}, "sizes make more than 4096 buckets");
}

TEST(BucketGrid, ShapeTextReadsLikeTheReports) {
  std::int64_t shape[] = {4, 128};
  EXPECT_EQ(common::shapeText(shape, 2), "[4, 128]");
  EXPECT_EQ(common::shapeText(shape, 0), "[]");
  EXPECT_EQ(common::shapeText(std::vector<std::int64_t>{4, 128}), "[4, 128]");
}

}  // namespace
}  // namespace memseal::pool
