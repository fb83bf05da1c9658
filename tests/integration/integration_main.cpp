// The main of memseal_integration_tests: every integration test file compiled into one program
// (libtorch's headers are parsed once per unity file rather than once per test file), run as one
// process per test file as when each file was its own program: `--memseal_source=NAME.cpp` keeps
// the cases defined in the file NAME.cpp, within what --gtest_filter selects.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr std::string_view kSourceFlag = "--memseal_source=";

std::vector<std::string> splitPatterns(const std::string& patterns) {
  std::vector<std::string> result;
  std::size_t start = 0;
  while (start <= patterns.size()) {
    const std::size_t end = std::min(patterns.find(':', start), patterns.size());
    if (end > start) result.push_back(patterns.substr(start, end - start));
    start = end + 1;
  }
  return result;
}

bool matchesAny(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& pattern : patterns) {
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

bool definedIn(const char* file, const std::string& source) {
  const std::string_view path(file ? file : "");
  if (path.size() < source.size() || path.substr(path.size() - source.size()) != source)
    return false;
  return path.size() == source.size() || path[path.size() - source.size() - 1] == '/';
}

// GoogleTest's filter (POSITIVE[-NEGATIVE], ':'-separated globs) narrowed to the cases of one
// source file, as a list of full names. Empty when nothing matches.
std::string filterForSource(const std::string& source) {
  const std::string filter = GTEST_FLAG_GET(filter);
  const std::size_t dash = filter.find('-');
  const auto positive = splitPatterns(filter.substr(0, dash));
  const auto negative = dash == std::string::npos ? std::vector<std::string>{}
                                                  : splitPatterns(filter.substr(dash + 1));
  std::string selected;
  const auto& unit_test = *testing::UnitTest::GetInstance();
  for (int suite_index = 0; suite_index < unit_test.total_test_suite_count(); ++suite_index) {
    const auto& suite = *unit_test.GetTestSuite(suite_index);
    for (int case_index = 0; case_index < suite.total_test_count(); ++case_index) {
      const auto& info = *suite.GetTestInfo(case_index);
      const std::string name = std::string(suite.name()) + "." + info.name();
      if (!definedIn(info.file(), source)) continue;
      if (!positive.empty() && !matchesAny(positive, name)) continue;
      if (matchesAny(negative, name)) continue;
      selected += (selected.empty() ? "" : ":") + name;
    }
  }
  return selected;
}

}  // namespace

int main(int argc, char** argv) {
  std::string source;
  std::vector<char*> arguments;
  for (int index = 0; index < argc; ++index) {
    const std::string_view argument(argv[index]);
    if (argument.substr(0, kSourceFlag.size()) == kSourceFlag) {
      source = std::string(argument.substr(kSourceFlag.size()));
    } else {
      arguments.push_back(argv[index]);
    }
  }
  int argument_count = static_cast<int>(arguments.size());
  arguments.push_back(nullptr);  // argv[argc]: GoogleTest moves it along as it removes its flags
  testing::InitGoogleTest(&argument_count, arguments.data());
  if (!source.empty()) {
    const std::string selected = filterForSource(source);
    if (selected.empty()) {
      // A misspelt file name in tests/CMakeLists.txt must not pass as "0 tests ran".
      std::fprintf(stderr, "memseal_integration_tests: no case of %s matches --gtest_filter=%s\n",
                   source.c_str(), GTEST_FLAG_GET(filter).c_str());
      return 1;
    }
    GTEST_FLAG_SET(filter, selected);
  }
  return RUN_ALL_TESTS();
}
