// A leak detector made in a forked child (DetectorOptions::forked_from_pid) judges the child's
// private memory: the pages it shared with its parent and then wrote (copy-on-write) grow it,
// while the resident set, which counted those pages from the fork on, does not move.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <vector>

#include "memseal/leak_detector.h"

namespace memseal {
namespace {

constexpr std::size_t kPageBytes = 4096;
constexpr std::size_t kWrittenPerStep = std::size_t{2} << 20;
constexpr std::size_t kSteps = 24;

// What the child found, as its exit status.
enum ChildVerdict {
  kAsExpected = 0,
  kNoPrivateGrowth = 10,  // the forked child's detector found no growth of private memory
  kNoCopyOnWriteFix,      // ... or without the copy-on-write cause
  kParentNotNamed,        // the report's origin does not name the parent
  kResidentSetGrew,       // the detector judging the resident set found growth it cannot see
  kThrew,
};

const char* verdictText(int verdict) {
  switch (verdict) {
    case kNoPrivateGrowth:
      return "no untracked growth of private memory";
    case kNoCopyOnWriteFix:
      return "the finding does not say copy-on-write";
    case kParentNotNamed:
      return "origin.forked_from_pid is not the parent's pid";
    case kResidentSetGrew:
      return "the resident set's detector found growth";
    case kThrew:
      return "the child threw";
  }
  return "as expected";
}

// `kSteps` steps, each writing one byte in every page of the next kWrittenPerStep bytes of
// `shared` (the kernel copies the whole page) beside a tensor loop that keeps nothing.
LeakReport writeSharedPagesEveryStep(char* shared, std::int64_t forked_from_pid) {
  DetectorOptions options;
  options.warmup = 3;
  options.on_leak = ReportPolicy::kNone;
  options.forked_from_pid = forked_from_pid;
  LeakDetector detector(options);
  for (std::size_t step = 0; step < kSteps; ++step) {
    char* written = shared + step * kWrittenPerStep;
    for (std::size_t offset = 0; offset < kWrittenPerStep; offset += kPageBytes) {
      written[offset] = 2;
    }
    torch::Tensor batch = torch::ones({64, 64});
    (void)batch.sum().item<float>();
    detector.step();
  }
  return detector.finish();
}

int judgeInChild(std::vector<char>& shared) {
  LeakReport as_forked = writeSharedPagesEveryStep(shared.data(), getppid());
  LeakReport as_resident = writeSharedPagesEveryStep(shared.data() + kSteps * kWrittenPerStep, 0);
  const LeakFinding* copied = nullptr;
  for (const LeakFinding& finding : as_forked.findings) {
    if (finding.category == LeakCategory::kUntrackedGrowth &&
        finding.retained == "private memory") {
      copied = &finding;
    }
  }
  if (copied == nullptr) return kNoPrivateGrowth;
  if (copied->hint.find("copy-on-write") == std::string::npos) return kNoCopyOnWriteFix;
  if (as_forked.origin.forked_from_pid != getppid()) return kParentNotNamed;
  if (as_resident.leak) return kResidentSetGrew;
  return kAsExpected;
}

TEST(ForkedChild, ItsDetectorSeesPagesCopiedOnWriteThatTheResidentSetDoesNot) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "resident memory is not used under ASan";
#endif
  // Written here, so every page is resident in the parent and shared with the child.
  std::vector<char> shared(2 * kSteps * kWrittenPerStep, 1);
  pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    int verdict = kThrew;
    try {
      verdict = judgeInChild(shared);
    } catch (...) {
    }
    _exit(verdict);  // not gtest's exit handlers: they are the parent's
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended with status " << status;
  EXPECT_EQ(WEXITSTATUS(status), kAsExpected) << verdictText(WEXITSTATUS(status));
}

}  // namespace
}  // namespace memseal
