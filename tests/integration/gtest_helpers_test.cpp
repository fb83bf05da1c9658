// Runs the child test binary that leaks on purpose and checks that each helper fails it, with the
// survivors in the output, and that clean tests still pass.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct ChildResult {
  int exit_code = -1;
  std::string output;
};

ChildResult runChild(const std::string& filter, bool listener) {
  std::string command = std::string(listener ? "MEMSEAL_CHILD_LISTENER=1 " : "") +
                        MEMSEAL_GTEST_CHILD + " --gtest_filter='" + filter + "' 2>&1";
  ChildResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(GtestHelpers, ExpectNoTensorLeakFailsALeakyStatement) {
  ChildResult child = runChild("Leaky.ExpectMacroFails", false);
  EXPECT_NE(child.exit_code, 0);
  EXPECT_NE(child.output.find("leaves no tensor alive"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("aten::ones"), std::string::npos) << child.output;
}

TEST(GtestHelpers, AssertNoTensorLeakFailsAndStopsTheTest) {
  ChildResult child = runChild("Leaky.AssertMacroFailsAndStops", false);
  EXPECT_NE(child.exit_code, 0);
  EXPECT_EQ(child.output.find("REACHED-AFTER-ASSERT"), std::string::npos) << child.output;
}

TEST(GtestHelpers, ExpectNoAllocationFailsAnAllocatingStatement) {
  ChildResult child = runChild("Leaky.AllocationMacroFails", false);
  EXPECT_NE(child.exit_code, 0);
  EXPECT_NE(child.output.find("makes no CPU allocation"), std::string::npos) << child.output;
}

TEST(GtestHelpers, ListenerFailsATestThatLeaksWithoutAnyMacro) {
  ChildResult without = runChild("Leaky.ListenerCatchesAPlainTest", false);
  EXPECT_EQ(without.exit_code, 0) << without.output;
  ChildResult with = runChild("Leaky.ListenerCatchesAPlainTest", true);
  EXPECT_NE(with.exit_code, 0);
  EXPECT_NE(with.output.find("still alive"), std::string::npos) << with.output;
  EXPECT_NE(with.output.find("[  FAILED  ] Leaky.ListenerCatchesAPlainTest"), std::string::npos);
}

TEST(GtestHelpers, CleanTestsPassWithAndWithoutTheListener) {
  EXPECT_EQ(runChild("Clean.*", false).exit_code, 0);
  ChildResult with = runChild("Clean.*", true);
  EXPECT_EQ(with.exit_code, 0) << with.output;
}

}  // namespace
