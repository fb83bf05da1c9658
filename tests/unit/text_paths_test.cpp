// Source paths as reports show them: normal (no "." or ".." as compilers record them) and relative
// to the working directory when under it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "common/text.h"

namespace memseal::common {
namespace {

TEST(TextPaths, NormalPathDropsDotAndDotDotComponents) {
  EXPECT_EQ(normalPath("/src/app/build/release/../../examples/x.cpp"), "/src/app/examples/x.cpp");
  EXPECT_EQ(normalPath("/src//app/./main.cpp"), "/src/app/main.cpp");
  EXPECT_EQ(normalPath("build/../x.cpp"), "x.cpp");
  EXPECT_EQ(normalPath(""), "");
  EXPECT_EQ(normalPath("<frozen runpy>"), "<frozen runpy>");
}

TEST(TextPaths, ShownPathIsRelativeUnderTheWorkingDirectoryOnly) {
  char buffer[4096];
  ASSERT_NE(::getcwd(buffer, sizeof(buffer)), nullptr);
  std::string here = normalPath(buffer);
  ASSERT_NE(here, "/") << "run the tests from a folder other than the root";
  EXPECT_EQ(shownPath(here + "/build/../examples/x.cpp"), "examples/x.cpp");
  // A sibling whose name starts with the working directory's is not under it.
  EXPECT_EQ(shownPath(here + "-other/x.cpp"), here + "-other/x.cpp");
  EXPECT_EQ(shownPath("/nowhere/else/../x.cpp"), "/nowhere/x.cpp");
}

}  // namespace
}  // namespace memseal::common
