// Runs the child test binary that leaks on purpose and checks that each helper fails it, with the
// survivors in the output, and that clean tests still pass.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct ChildResult {
  int exit_code = -1;
  std::string output;
};

ChildResult runChild(const std::string& filter, bool listener,
                     const std::string& environment = "") {
  std::string command = environment + std::string(listener ? " MEMSEAL_CHILD_LISTENER=1 " : " ") +
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

TEST(GtestHelpers, APeakAboveItsBudgetFailsWithWhatThePeakHeld) {
  ChildResult child = runChild("Leaky.PeakAboveItsBudget", false);
  EXPECT_NE(child.exit_code, 0);
  EXPECT_NE(child.output.find("peaks at most at \"1MiB\" (1048576 bytes)"), std::string::npos)
      << child.output;
  EXPECT_NE(child.output.find("by role"), std::string::npos) << child.output;
  ChildResult within = runChild("Peak.WithinItsBudget", false);
  EXPECT_EQ(within.exit_code, 0) << within.output;
  // Under the listener a tracker runs already: the budget cannot be measured, and says why.
  ChildResult listener = runChild("Peak.WithinItsBudget", true);
  EXPECT_NE(listener.exit_code, 0);
  EXPECT_NE(listener.output.find("while another memseal tracker runs"), std::string::npos)
      << listener.output;
}

TEST(GtestHelpers, APeakGrownOverItsBaselineFailsWithTheDiff) {
  char folder[] = "/tmp/memseal-gtest-baseline-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  std::string directory = std::string("MEMSEAL_BASELINE_DIR=") + folder;
  ChildResult first = runChild("Peak.HeldToItsBaseline", false, directory);
  EXPECT_EQ(first.exit_code, 0) << first.output;
  std::string baseline = std::string(folder) + "/Peak.HeldToItsBaseline.json";
  ASSERT_EQ(access(baseline.c_str(), R_OK), 0) << "the first run writes the baseline";
  ChildResult same = runChild("Peak.HeldToItsBaseline", false, directory);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  ChildResult grown =
      runChild("Peak.HeldToItsBaseline", false, directory + " MEMSEAL_CHILD_ELEMENTS=65536");
  EXPECT_NE(grown.exit_code, 0);
  EXPECT_NE(grown.output.find("the peak grew from 4.0 KiB to 256.0 KiB"), std::string::npos)
      << grown.output;
  EXPECT_NE(grown.output.find("memseal diff (explain)"), std::string::npos) << grown.output;
  ChildResult updated =
      runChild("Peak.HeldToItsBaseline", false,
               directory + " MEMSEAL_CHILD_ELEMENTS=65536 MEMSEAL_UPDATE_BASELINE=1");
  EXPECT_EQ(updated.exit_code, 0) << updated.output;
  ChildResult held =
      runChild("Peak.HeldToItsBaseline", false, directory + " MEMSEAL_CHILD_ELEMENTS=65536");
  EXPECT_EQ(held.exit_code, 0) << held.output;
  std::remove(baseline.c_str());
  rmdir(folder);
}

TEST(GtestHelpers, CleanTestsPassWithAndWithoutTheListener) {
  EXPECT_EQ(runChild("Clean.*", false).exit_code, 0);
  ChildResult with = runChild("Clean.*", true);
  EXPECT_EQ(with.exit_code, 0) << with.output;
}

}  // namespace
