// Which libtorch record scopes name the ops of an allocation's site: user scopes do (as ATen ops,
// autograd nodes and TorchScript functions do); the scopes that only mobile builds record do not.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>

#include "integration/snapshot_helpers.h"
#include "memseal/tracker.h"

namespace memseal {
namespace {

TEST(OpNames, AUserScopeNamesTheSiteAndAMobileOnlyScopeDoesNot) {
  Tracker tracker;  // ops watched on every step
  tracker.start();
  c10::DataPtr kept;
  {
    RECORD_USER_SCOPE("test::region");
    {
      // A desktop build of libtorch never records this scope (ENABLE_RECORD_KERNEL_FUNCTION_DTYPE):
      // were it watched, it would stand in for the op that allocated.
      RECORD_FUNCTION_WITH_SCOPE(at::RecordScope::KERNEL_FUNCTION_DTYPE, "test::dtype_tag",
                                 std::vector<c10::IValue>());
      kept = c10::GetCPUAllocator()->allocate(512);
    }
  }
  Snapshot snapshot = tracker.snapshot();
  const SiteSnapshot* site = test::findSite(snapshot, "test::region");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->site.op, "test::region");
  EXPECT_EQ(site->live_bytes, 512);
  for (const SiteSnapshot& other : snapshot.sites) {
    EXPECT_NE(other.site.op, "test::dtype_tag");
    EXPECT_NE(other.site.outer_op, "test::dtype_tag");
  }
}

}  // namespace
}  // namespace memseal
