// A job across machines: the ranks of other nodes send their reports through the job's store,
// rank 0 gathers them into its run folder (inject/node_gather.h). The store is a real c10d
// TCPStore served in this process, standing in for the one torchrun's agent hosts.
#include "inject/node_gather.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "common/schemas.h"
#include "inject/run_protocol.h"

namespace memseal::inject {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderThreadSanitizer = true;  // the store's server thread is libtorch's, not seen
#else
constexpr bool kUnderThreadSanitizer = false;
#endif

RankIdentity rankOfTwoNodes(int rank, int node) {
  RankIdentity identity;
  identity.rank = rank;
  identity.world_size = 3;  // rank 0 on node 0; ranks 1 and 2 on node 1
  identity.run_id = "gather-test";
  identity.node = node;
  identity.nodes = 2;
  return identity;
}

std::string gatherFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class NodeGather : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kUnderThreadSanitizer) GTEST_SKIP() << "the store's threads are libtorch's, not seen";
    c10d::TCPStoreOptions options;
    options.port = 0;  // any free port
    options.isServer = true;
    options.waitWorkers = false;
    server_ = std::make_unique<c10d::TCPStore>("127.0.0.1", options);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(server_->getPort()).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
    // mkdtemp, not std::filesystem: libtorch exports filesystem functions of its own, which this
    // program binds to.
    char pattern[] = "/tmp/memseal-gather-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    folder_ = pattern;
  }
  void TearDown() override {
    for (const char* name : {"TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT",
                             "LOCAL_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT"}) {
      unsetenv(name);
    }
    if (folder_.empty()) return;
    if (DIR* dir = opendir(folder_.c_str())) {
      while (dirent* entry = readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") unlink((folder_ + "/" + name).c_str());
      }
      closedir(dir);
    }
    rmdir(folder_.c_str());
  }
  std::string gathered(int rank) {
    return gatherFileText(folder_ + "/rank-" + std::to_string(rank) + kGatheredSuffix);
  }

  std::unique_ptr<c10d::TCPStore> server_;
  std::string folder_;
};

TEST_F(NodeGather, OnlyAJobOfSeveralNodesWithTheAgentsStoreGathers) {
  EXPECT_TRUE(jobStoreOf(rankOfTwoNodes(1, 1)).has_value());
  RankIdentity one_machine = rankOfTwoNodes(1, 0);
  one_machine.nodes = 1;
  EXPECT_FALSE(jobStoreOf(one_machine).has_value());
  // A store in rank 0's own process may be gone before the other nodes end.
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  EXPECT_FALSE(jobStoreOf(rankOfTwoNodes(1, 1)).has_value());
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  setenv("MASTER_PORT", "not a port", 1);
  EXPECT_FALSE(jobStoreOf(rankOfTwoNodes(1, 1)).has_value());
}

TEST_F(NodeGather, AReportOfManyPartsArrivesWholeAndARankWithoutMemsealIsSaidSo) {
  // Larger than the store takes in one value: sent in parts, read back whole.
  std::string report = "{\"schema\": \"memseal.check/1\", \"notes\": [\"" +
                       std::string(3 * 1024 * 1024 + 17, 'x') + "\"]}";
  RankIdentity sender = rankOfTwoNodes(1, 1);
  announceToNodeZero(sender);
  std::optional<JobStore> store = jobStoreOf(sender);
  ASSERT_TRUE(store.has_value());
  sendToNodeZero(*store, sender, 4242, report);
  // Rank 2 never started memseal: not waited for (a long timeout would show as a slow test).
  gatherOtherNodes(*jobStoreOf(rankOfTwoNodes(0, 0)), rankOfTwoNodes(0, 0), folder_,
                   std::chrono::seconds(600));
  std::string one = gathered(1);
  ASSERT_EQ(one.rfind(common::kGatheredSchema.tag() + "\n", 0), 0u) << one.substr(0, 200);
  EXPECT_NE(one.find("\nrank=1\n"), std::string::npos);
  EXPECT_NE(one.find("\nnode=1\n"), std::string::npos);
  EXPECT_NE(one.find("\npid=4242\n"), std::string::npos);
  ASSERT_NE(one.find("\n\n"), std::string::npos);
  EXPECT_EQ(one.substr(one.find("\n\n") + 2), report);
  std::string two = gathered(2);
  EXPECT_NE(two.find("\nrank=2\n"), std::string::npos);
  EXPECT_NE(two.find("missing=memseal did not run in it"), std::string::npos) << two;
}

TEST_F(NodeGather, ARankThatStartedButNeverSentIsMissingAfterTheTimeout) {
  announceToNodeZero(rankOfTwoNodes(1, 1));
  announceToNodeZero(rankOfTwoNodes(2, 1));
  std::optional<JobStore> store = jobStoreOf(rankOfTwoNodes(2, 1));
  ASSERT_TRUE(store.has_value());
  sendToNodeZero(*store, rankOfTwoNodes(2, 1), 7, "{}");
  gatherOtherNodes(*store, rankOfTwoNodes(0, 0), folder_, std::chrono::seconds(1));
  EXPECT_NE(gathered(1).find("missing=no report came from it through the job's store within 1 s"),
            std::string::npos)
      << gathered(1);
  EXPECT_NE(gathered(2).find("\npid=7\n"), std::string::npos) << gathered(2);
}

TEST_F(NodeGather, AStoreThatIsGoneLeavesEachRankMissingWithWhy) {
  std::optional<JobStore> store = jobStoreOf(rankOfTwoNodes(0, 0));
  ASSERT_TRUE(store.has_value());
  server_.reset();  // the agent that hosted it has ended
  gatherOtherNodes(*store, rankOfTwoNodes(0, 0), folder_, std::chrono::seconds(0));
  for (int rank : {1, 2}) {
    EXPECT_NE(gathered(rank).find("missing=rank 0 could not reach the job's store at 127.0.0.1:"),
              std::string::npos)
        << gathered(rank);
  }
}

}  // namespace
}  // namespace memseal::inject
